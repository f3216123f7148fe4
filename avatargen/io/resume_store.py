"""``OUT.resume/``: what a stopped render leaves so that ``--resume`` can continue it.

Layout (every file is written to a temporary name and moved into place with ``os.replace``, the JSON last, so a kill
at any moment leaves a consistent folder)::

    OUT.resume/resume.json          fingerprint of the inputs and config (and that resolved config), the parts, the
                                    checkpoints
    OUT.resume/state-<F>.safetensors rolling state after frame F (a few hundred KiB, the same size for any duration)
    OUT.resume/part-<k>.mp4          video of earlier runs (run k's frames [start, end))

The current run writes ``OUT.partial.mp4``; on resume it becomes the next part. Kept: the checkpoint the current run
started from, the last ``WRITTEN_KEPT`` whose frames reached the encoder (when the process is killed, ffmpeg has not
written the frames in its look-ahead and the fragment it is filling: up to about two checkpoints), and those whose
frames have not reached it yet (behind ``--realtime``'s pacer the generation runs checkpoints ahead of the video).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from safetensors import SafetensorError, safe_open

from avatargen.errors import BadInputError
from avatargen.io.owned_names import RESUME_MARKER, is_avatargen_resume_folder, remove_name, resume_folder_for

if TYPE_CHECKING:  # a type only: a render that runs no model imports no torch
    from torch import Tensor

WRITTEN_KEPT = 3  # checkpoints kept among those whose frames reached the encoder (see the module docstring)

# The format of resume.json and of the checkpoints it lists. A folder of another version is never read: the render
# starts over (2: the engine's and the family's parts of a checkpoint stored apart; 3: the current run's part id and
# each state file's sha256).
VERSION = 3


class OtherFormatError(Exception):
    """The resume folder was written in another format (by another avatargen version)."""


@dataclass
class Part:
    """Frames [start, end) of the timeline, the first ``end - start`` video frames of ``file``."""

    file: Path
    start: int
    end: int


def file_digest(path: Path) -> str:
    """sha256 of a file's bytes (streamed: constant memory for any size)."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _plain_name(name: object) -> str:
    """A file name inside the folder, as ``resume.json`` lists it (no folder part: nothing outside is read)."""
    if not isinstance(name, str) or not name or Path(name).name != name or name in (".", ".."):
        raise ValueError(f"'{name}' is not a file name of the folder")
    return name


def _checked_checkpoint(checkpoint: object) -> dict[str, Any]:
    """One checkpoint of ``resume.json`` with its frame count an integer and its file a plain name."""
    if not isinstance(checkpoint, dict) or isinstance(checkpoint.get("frames"), bool):
        raise ValueError(f"checkpoint {json.dumps(checkpoint)[:80]} is not {{'frames': N, 'file': NAME, 'meta': {{...}}}}")
    if not isinstance(checkpoint.get("frames"), int) or not isinstance(checkpoint.get("meta", {}), dict):
        raise ValueError(f"checkpoint frames {json.dumps(checkpoint.get('frames'))} is not a frame number")
    if not isinstance(checkpoint.get("sha256"), str):
        raise ValueError(f"checkpoint {checkpoint['frames']} has no sha256")
    _plain_name(checkpoint.get("file"))
    return checkpoint


class ResumeStore:
    """The resume folder of output ``OUT.mp4``: ``OUT.resume/``."""

    def __init__(self, output: Path):
        self.folder = resume_folder_for(output)
        self.index = self.folder / "resume.json"
        self.fingerprint: dict[str, str] = {}
        # The resolved config the "config" digest was taken of: what a refused --resume names as changed (None in a
        # folder written before it was kept)
        self.settings: dict[str, Any] | None = None
        self.parts: list[Part] = []
        # {"frames": F, "file": name, "sha256": hex digest of the file, "meta": {...}}, oldest first
        self.checkpoints: list[dict[str, Any]] = []
        self.run_start = 0  # the frame the current run started at
        # The current run's part id, in its partial MP4's tag (io.owned_names.part_id_of): --resume splices only the
        # video of the stopped run itself, never another MP4 put at its name.
        self.part_id: str | None = None

    # --- reading --------------------------------------------------------------------------------------------------

    def exists(self) -> bool:
        return not self.folder.is_symlink() and self.index.is_file()

    def load(self) -> None:
        """Read ``resume.json``; a folder that cannot be read is reported, never silently ignored; one of another
        format raises ``OtherFormatError`` (its caller starts over)."""
        try:
            data = json.loads(self.index.read_text())
        except (OSError, ValueError) as error:
            raise BadInputError(
                f"resume state '{self.folder}' is unreadable ({error}); render without --resume to start over"
            ) from None
        if not isinstance(data, dict) or data.get("version") != VERSION:
            raise OtherFormatError(f"format {data.get('version') if isinstance(data, dict) else '?'}")
        try:
            self.fingerprint = dict(data["fingerprint"])
            self.settings = data["settings"] if isinstance(data.get("settings"), dict) else None
            self.parts = [Part(self.folder / _plain_name(p["file"]), int(p["start"]), int(p["end"])) for p in data["parts"]]
            self.checkpoints = [_checked_checkpoint(c) for c in data["checkpoints"]]
            self.part_id = data["partial"] if isinstance(data["partial"], str) else None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            raise BadInputError(
                f"resume state '{self.folder}' is unreadable ({error}); render without --resume to start over"
            ) from None

    def mismatch(self, fingerprint: dict[str, str]) -> list[str]:
        """Names of the inputs that differ from the stopped render's ('audio', 'config', ...)."""
        keys = sorted(set(fingerprint) | set(self.fingerprint))
        return [k for k in keys if fingerprint.get(k) != self.fingerprint.get(k)]

    def parts_end(self) -> int:
        return self.parts[-1].end if self.parts else 0

    def choose(self, partial_frames: int) -> dict[str, Any] | None:
        """The latest checkpoint the video on disk covers: parts up to ``parts_end()``, then ``partial_frames``."""
        start = self.parts_end()
        usable = [c for c in self.checkpoints if start <= c["frames"] <= start + partial_frames]
        return usable[-1] if usable else None

    def read_state(self, checkpoint: dict[str, Any]) -> dict[str, Tensor]:
        """The tensors of ``checkpoint``; a file whose bytes are not those written (a disk error, an edit: finite
        values a model would still run on, to garbage or a crash) is refused in one line."""
        file = self.folder / checkpoint["file"]
        try:
            if file_digest(file) != checkpoint["sha256"]:
                raise BadInputError(f"resume state '{file}' is damaged (its bytes differ from those written); render "
                                    "without --resume to start over")  # fmt: skip
            return _read_tensors(file)
        except (SafetensorError, OSError) as error:
            raise BadInputError(
                f"resume state '{file}' is unreadable ({error}); render without --resume to start over"
            ) from None

    # --- writing --------------------------------------------------------------------------------------------------

    def reset(self, fingerprint: dict[str, str], settings: dict[str, Any] | None = None) -> None:
        """Start a fresh render: forget any earlier state (what is at the folder's name, a link as a link: the render
        checked before that it is avatargen's, or was told to replace it) and mark the new folder as avatargen's."""
        remove_name(self.folder)
        self.fingerprint, self.parts, self.checkpoints, self.run_start = dict(fingerprint), [], [], 0
        self.settings = settings
        self.part_id = None
        self.folder.mkdir(parents=True)
        (self.folder / RESUME_MARKER).write_text("made by avatargen: removed with the render it resumes\n")
        self._write_index()

    def add_part(self, partial: Path, end: int) -> None:
        """Keep the first ``end - parts_end()`` frames of ``partial`` as the next part (moved into the folder)."""
        start = self.parts_end()
        if end > start:
            target = self.folder / f"part-{len(self.parts)}.mp4"
            os.replace(partial, target)
            self.parts.append(Part(target, start, end))
        else:
            partial.unlink(missing_ok=True)
        self._write_index()

    def begin_run(self, start: int) -> None:
        """The current run starts at frame ``start`` with a part id of its own (``part_id``): drop checkpoints it
        cannot use any more."""
        self.run_start = start
        self.part_id = secrets.token_hex(8)
        self.checkpoints = [c for c in self.checkpoints if c["frames"] == start]
        self._write_index()
        self._remove_unlisted()

    def save(self, tensors: dict[str, Tensor], meta: dict[str, Any], written: int | None = None) -> None:
        """Add the checkpoint after ``meta['frames']`` frames; keeps the run's start, the last few of those within the
        ``written`` frames this run handed to the encoder (None: all), and every one past them."""
        frames = int(meta["frames"])
        name = f"state-{frames}.safetensors"
        tmp = self.folder / f".{name}.tmp"
        _write_tensors(tensors, tmp)
        digest = file_digest(tmp)
        os.replace(tmp, self.folder / name)
        kept = [c for c in self.checkpoints if c["frames"] != frames]
        start = [c for c in kept if c["frames"] == self.run_start]
        later = [c for c in kept if c["frames"] != self.run_start]
        later.append({"frames": frames, "file": name, "sha256": digest, "meta": meta})
        reached = len(later) if written is None else sum(c["frames"] <= self.run_start + written for c in later)
        self.checkpoints = start + later[max(0, reached - WRITTEN_KEPT):]  # in frame order: those reached first
        self._write_index()
        self._remove_unlisted()

    def remove(self) -> None:
        """Remove the folder once its render is done, if it is avatargen's (never a link, never a user's folder)."""
        if is_avatargen_resume_folder(self.folder):
            shutil.rmtree(self.folder, ignore_errors=True)

    def _write_index(self) -> None:
        data = {
            "version": VERSION,
            "fingerprint": self.fingerprint,
            "settings": self.settings,
            "parts": [{"file": p.file.name, "start": p.start, "end": p.end} for p in self.parts],
            "checkpoints": self.checkpoints,
            "partial": self.part_id,
        }
        tmp = self.folder / ".resume.json.tmp"
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, self.index)

    def _remove_unlisted(self) -> None:
        listed = {c["file"] for c in self.checkpoints}
        for file in self.folder.glob("state-*.safetensors"):
            if file.name not in listed:
                file.unlink(missing_ok=True)


def _write_tensors(tensors: dict[str, Tensor], path: Path) -> None:
    """``tensors`` as a safetensors file; a render that runs no model has none, written without torch."""
    if not tensors:
        from safetensors.numpy import save_file  # the same format: an empty file needs no framework
    else:
        from safetensors.torch import save_file
    save_file(tensors, str(path))


def _read_tensors(path: Path) -> dict[str, Tensor]:
    """The tensors of a safetensors file, on the CPU; none read (nor torch imported) where it holds none."""
    with safe_open(str(path), framework="numpy") as opened:
        if not list(opened.keys()):
            return {}
    from safetensors.torch import load_file

    return load_file(str(path), device="cpu")
