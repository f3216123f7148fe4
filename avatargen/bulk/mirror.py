"""A render's resume state, copied to a bucket as it is written and brought back on any machine.

A render whose output is ``s3://b/x.mp4`` writes locally like any render (``x.partial.mp4``, ``x.resume/``, in its
scratch folder). After each checkpoint, ``ResumeMirror.snapshot()`` (the render's ``after_checkpoint``) takes what a
resume needs -- hard links, in a moment -- and a background thread copies it to ``s3://b/x.resume/`` (and, every
``REFRESH_S`` between checkpoints, what ffmpeg has added to the partial MP4 since):

    resume.json                 the local resume.json: fingerprint, parts, checkpoints
    state-F.safetensors         the checkpoints it lists
    part-K.mp4                  the earlier runs' videos
    partial-TOKEN-N.bin         the current run's video, as the bytes appended since the last copy (it only grows)
    partial.json                which of those make the current run's video, and the frame that run started at
    .avatargen-resume           the folder's mark

Each copy writes new objects first, then ``resume.json``, then ``partial.json``, then deletes what neither lists,
so the folder in the bucket is usable at every moment: a render killed with its machine (a pre-empted VM, a lost Ray
node) resumes elsewhere from the latest checkpoint its copied video covers (``restore()``, then the usual
``--resume``), at most about one checkpoint behind. Before each copy is committed the job's claim is checked: a
worker that lost it writes nothing more.
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
import shutil
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from avatargen.bulk.locations import ObjectUrl
from avatargen.bulk.s3 import Store
from avatargen.errors import AvatarGenError
from avatargen.io.owned_names import RESUME_MARKER, resume_folder_for
from avatargen.render.request import partial_path_for

INDEX, PARTIAL_INDEX = "resume.json", "partial.json"
REFRESH_S = 0.5  # between checkpoints, how often the partial MP4's new bytes are copied


@dataclass
class _Snapshot:
    """One checkpoint's worth of what to copy: files (staged as hard links) and how far the partial MP4 went."""

    folder: Path  # the staging folder holding the links
    index: bytes  # resume.json as it was
    files: list[str]  # names in ``folder`` to upload (states, parts, the mark)
    listed: set[str]  # every name the index needs in the bucket
    run_start: int  # the frame the partial MP4's first frame is (the end of the parts)
    partial: Path | None  # a link to the partial MP4, or None
    partial_size: int = 0
    partial_id: tuple[int, int] = (0, 0)


@dataclass
class _Sent:
    """What the bucket holds of the current run's video: its segments, in order."""

    partial_id: tuple[int, int] = (0, 0)
    run_start: int = -1
    size: int = 0
    segments: list[dict] = field(default_factory=list)


class ResumeMirror:
    """The copy of one render's resume state in the bucket (see the module's docstring)."""

    def __init__(self, store: Store, remote_output: ObjectUrl, local_output: Path,
                 verify: Callable[[], bool] | None = None):  # fmt: skip
        self.store = store
        self.remote = remote_output.with_name(f"{remote_output.stem}.resume")
        self.local = resume_folder_for(local_output)
        self.partial = partial_path_for(local_output)
        self.staging = local_output.with_name(f".{local_output.stem}.mirror")
        self.verify = verify if verify is not None else (lambda: True)
        self.token = secrets.token_hex(4)  # segment names of this process never collide with an earlier one's
        self._uploaded: dict[str, int] = {}  # name -> size of what the bucket holds under the folder
        self._sent = _Sent()
        self._count = itertools.count()
        self._pending: _Snapshot | None = None
        self._busy = False
        self._error: BaseException | None = None
        self._cond = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._listed = False
        self._live: _Snapshot | None = None  # the latest snapshot whose partial MP4 the refreshes follow

    # -- the render's side: quick -------------------------------------------------------------------------------

    def snapshot(self) -> None:
        """Stage what a resume needs now and hand it to the copying thread (replacing a copy not yet begun)."""
        index = (self.local / INDEX).read_bytes()
        data = json.loads(index)
        listed = (
            {RESUME_MARKER} | {c["file"] for c in data["checkpoints"]} | {Path(p["file"]).name for p in data["parts"]}
        )
        folder = self.staging / str(next(self._count))
        folder.mkdir(parents=True)
        files = []
        for name in sorted(listed):
            source = self.local / name
            if self._uploaded.get(name) == _size(source):
                continue
            _link_or_copy(source, folder / name)
            files.append(name)
        run_start = data["parts"][-1]["end"] if data["parts"] else 0
        snap = _Snapshot(folder, index, files, listed, run_start, None)
        if self.partial.is_file():
            _link_or_copy(self.partial, folder / "partial")
            info = os.stat(folder / "partial")
            snap.partial, snap.partial_size, snap.partial_id = (
                folder / "partial",
                info.st_size,
                (info.st_dev, info.st_ino),
            )
        with self._cond:
            if self._error is not None:
                raise self._error
            if self._pending is not None:
                shutil.rmtree(self._pending.folder, ignore_errors=True)
            self._pending = snap
            if self._thread is None:
                self._thread = threading.Thread(target=self._copying, name="resume mirror", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def flush(self) -> None:
        """Wait until the latest snapshot is in the bucket (raises what copying it raised)."""
        with self._cond:
            while (self._pending is not None or self._busy) and self._error is None:
                self._cond.wait()
            if self._error is not None:
                raise self._error

    def sync(self) -> None:
        """Copy the state as it is now and wait for it (after a stop or an error: what was rendered is kept)."""
        if (self.local / INDEX).is_file():
            self.snapshot()
            self.flush()

    @property
    def holds_state(self) -> bool:
        """Whether the bucket holds resume state of this render: a checkpoint this run copied, or an earlier run's."""
        return INDEX in self._uploaded or self.store.head(self.remote / INDEX) is not None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=60)
        shutil.rmtree(self.staging, ignore_errors=True)

    # -- the copying thread ---------------------------------------------------------------------------------------

    def _copying(self) -> None:
        while True:
            with self._cond:
                if self._pending is None and not self._closed:
                    self._cond.wait(timeout=REFRESH_S)
                if self._pending is None and self._closed:
                    return
                snap, self._pending, self._busy = self._pending, None, True
            try:
                if snap is not None:
                    self._copy(snap)
                else:
                    self._refresh_partial()
            except BaseException as error:  # noqa: BLE001 - reported to the render at its next checkpoint
                with self._cond:
                    self._error = (
                        error
                        if isinstance(error, AvatarGenError)
                        else AvatarGenError(
                            f"copying the resume state to '{self.remote}' failed ({error.__class__.__name__}: {error})"
                        )
                    )
                return
            finally:
                if snap is not None:
                    shutil.rmtree(snap.folder, ignore_errors=True)
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _refresh_partial(self) -> None:
        """Between checkpoints: the video ffmpeg wrote since the last copy (the fragment that ends at a checkpoint is
        written only after it), so that the bucket covers the latest checkpoint moments after it is taken."""
        live = self._live
        if live is None or _size(live.partial) <= self._sent.size or not self.verify():
            return
        sent = self._send_partial(replace(live, partial_size=_size(live.partial)))
        self._commit_partial(sent)

    def _copy(self, snap: _Snapshot) -> None:
        if not self._listed:  # what an earlier render left there: removed once this one's state is committed
            self._uploaded = {url.name: size for url, size in self.store.list(self.remote)}
            self._listed = True
        for name in snap.files:
            self.store.upload(snap.folder / name, self.remote / name)
            self._uploaded[name] = _size(snap.folder / name)
        sent = self._send_partial(snap)
        if not self.verify():  # another worker holds the job now: this one writes nothing more
            return
        self.store.put(self.remote / INDEX, snap.index)
        self._uploaded[INDEX] = 0
        self._commit_partial(sent)
        keep = snap.listed | {INDEX, PARTIAL_INDEX} | {s["name"] for s in sent.segments}
        for name in [n for n in self._uploaded if n not in keep]:
            self.store.delete(self.remote / name)
            del self._uploaded[name]
        self._keep_live(snap)

    def _commit_partial(self, sent: _Sent) -> None:
        self.store.put(self.remote / PARTIAL_INDEX, json.dumps(
            {"run_start": sent.run_start, "size": sent.size, "segments": sent.segments}).encode())  # fmt: skip
        self._uploaded[PARTIAL_INDEX] = 0
        self._sent = sent

    def _keep_live(self, snap: _Snapshot) -> None:
        """Keep the snapshot's link to the partial MP4 (its file, even once the path names another) for refreshes."""
        if snap.partial is None:
            self._live = None
            return
        live = self.staging / "live"
        live.mkdir(parents=True, exist_ok=True)
        os.replace(snap.partial, live / "partial")
        self._live = replace(snap, partial=live / "partial", files=[])

    def _send_partial(self, snap: _Snapshot) -> _Sent:
        """The segments of the current run's video in the bucket after this snapshot (new bytes uploaded)."""
        sent = self._sent
        if snap.partial is None:
            return _Sent(run_start=snap.run_start)
        if sent.partial_id != snap.partial_id or sent.run_start != snap.run_start or snap.partial_size < sent.size:
            sent = _Sent(snap.partial_id, snap.run_start)  # a new run, or the file was rewritten (trimmed at a stop)
        if snap.partial_size == sent.size:
            return sent
        name = f"partial-{self.token}-{next(self._count)}.bin"
        with open(snap.partial, "rb") as file:
            file.seek(sent.size)
            data = file.read(snap.partial_size - sent.size)
        self.store.put(self.remote / name, data)
        self._uploaded[name] = len(data)
        return _Sent(snap.partial_id, snap.run_start, sent.size + len(data),
                     [*sent.segments, {"name": name, "size": len(data)}])  # fmt: skip

    # -- another machine's side -----------------------------------------------------------------------------------

    def restore(self) -> bool:
        """Rebuild the local resume folder and partial MP4 from the bucket; False where the bucket holds none. A
        checkpoint whose state did not reach the bucket, or left it while this read (a worker still rendering the job,
        whose copy moved on to a newer checkpoint), is left out; a partial of another run than the index's is not
        used (the run then continues from its start checkpoint)."""
        found = self.store.read(self.remote / INDEX)
        if found is None:
            return False
        data = json.loads(found[0])
        shutil.rmtree(self.local, ignore_errors=True)
        self.partial.unlink(missing_ok=True)
        self.local.mkdir(parents=True)
        (self.local / RESUME_MARKER).write_text("made by avatargen: removed with the render it resumes\n")
        present = {url.name: size for url, size in self.store.list(self.remote)}
        for part in data.get("parts", []):
            self.store.download(
                self.remote / Path(part["file"]).name, self.local / Path(part["file"]).name, "resume part"
            )
        checkpoints = []
        for checkpoint in data.get("checkpoints", []):
            file = checkpoint.get("file")
            if file in present and self.store.download(self.remote / file, self.local / file, "checkpoint", True):
                checkpoints.append(checkpoint)
        (self.local / INDEX).write_text(json.dumps({**data, "checkpoints": checkpoints}, indent=1))
        index = self.store.read(self.remote / PARTIAL_INDEX)
        run_start = data["parts"][-1]["end"] if data.get("parts") else 0
        segments = json.loads(index[0]) if index is not None else {}
        if segments.get("run_start") == run_start and all(s["name"] in present for s in segments.get("segments", [])):
            with open(self.partial, "wb") as file:
                for segment in segments["segments"]:
                    part = self.store.read(self.remote / segment["name"])
                    file.write(part[0] if part is not None else b"")
        self._uploaded = dict(present)
        self._listed = True
        return True

    def remove(self) -> None:
        """Delete the copy in the bucket (its render finished)."""
        self.store.delete_folder(self.remote)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
