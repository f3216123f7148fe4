"""Never losing work: stop requests from signals, and what a resumed render must match and continue from.

A render checkpoints its rolling state into ``OUT.resume/`` (``ResumeStore``) at the frames of a ``CheckpointGrid``,
where the encoder also forces a keyframe. SIGINT/SIGTERM ask the pipeline to stop between two steps
(``StopRequests``); ``--resume`` continues from the latest checkpoint whose frames are in the partial MP4
(docs/reliability.md).
"""

from __future__ import annotations

import errno
import hashlib
import json
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf
from safetensors import SafetensorError

from avatargen.errors import EXIT_INTERRUPTED, EXIT_TERMINATED, BadInputError, ResumeMismatchError, first_line
from avatargen.interrupts import received
from avatargen.io.mp4_join import salvage_part
from avatargen.io.owned_names import part_id_of
from avatargen.io.encoder import disk_full_error
from avatargen.io.resume_store import OtherFormatError, ResumeStore, file_digest, text_digest
from avatargen.pipeline.checkpoint import RenderCheckpoint
from avatargen.threads import torch_thread_count


class StopRequests:
    """SIGINT/SIGTERM handlers for the duration of a render (main thread only; previous handlers restored on exit).

    The first signal only sets a flag: the pipeline checks it between steps, so the chunk being generated is
    finished, and the render then closes a valid partial MP4 of everything emitted. A second signal interrupts at
    once (KeyboardInterrupt), for a user who does not want to wait for the chunk. ``on_request`` callbacks run on the
    first signal, in the handler (they must only set flags or write to a pipe): an audio stream ends its input there.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}
        self._finishing = False
        self._callbacks: list[Callable[[], None]] = []

    def on_request(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` on the first stop request (at once if one came already)."""
        self._callbacks.append(callback)
        if self.signum is not None:
            callback()

    def __enter__(self) -> "StopRequests":
        self.signum = self.signum or received()  # one that came at start-up and a library's `except:` swallowed
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None and not self._finishing:
            raise KeyboardInterrupt
        first = self.signum is None
        self.signum = self.signum or signum
        for callback in self._callbacks if first else ():
            callback()

    def request(self, signum: int = signal.SIGINT) -> None:
        """Ask for a stop from code, as a first signal would (any thread: a batch driver stopping its workers, a
        worker that lost its claim on a job)."""
        if self.signum is None:
            self._handle(signum, None)

    def finishing(self) -> None:
        """From now on signals only count: what is left (closing the partial MP4, cutting its audio at its video)
        takes a moment, and cutting it short would leave audio past the last frame."""
        self._finishing = True

    def requested(self) -> bool:
        return self.signum is not None

    @property
    def exit_code(self) -> int:
        return EXIT_TERMINATED if self.signum == signal.SIGTERM else EXIT_INTERRUPTED

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else "SIGINT"


# Keys of the resolved config known not to change a pixel of the video: how it is delivered, timeouts, where the
# ranks run. Every other key, and every key added with '+', is in the fingerprint; runtime.device and runtime.threads
# are there by the values they resolve to (floating-point sums depend on both).
NOT_FINGERPRINTED = (
    "output.save_config", "output.publish", "output.on_publish_failure", "output.publish_timeout_s",
    "output.hls_window", "output.realtime", "output.realtime_buffer_s", "output.realtime_target_s",
    "runtime.shard", "runtime.sequence_parallel", "runtime.guidance_parallel", "runtime.pipeline_parallel",
    "runtime.batch_mode",
    "runtime.dist_timeout_s", "runtime.numa",
    "runtime.offload", "runtime.offload_resident_blocks",
)  # fmt: skip
NOT_FINGERPRINTED_SECTIONS = ("batch", "storage")  # how jobs are handed out and where files are kept


def fingerprinted_settings(cfg: DictConfig, device: Any, dtype: str = "float32", layout: Any = None,
                           threads: int | None = None) -> dict[str, Any]:  # fmt: skip
    """The resolved config as ``fingerprint`` digests it: without ``NOT_FINGERPRINTED`` and
    ``NOT_FINGERPRINTED_SECTIONS``, with the device, thread count (``threads``; None: torch's) and compute dtype this
    process resolved (``runtime.dtype=auto`` can resolve differently on another machine) and, for a render whose ranks
    split the work, the guidance and sequence degrees of its ``layout`` (they change float sums)."""
    container = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    for key in NOT_FINGERPRINTED:
        section, _, leaf = key.partition(".")
        container.get(section, {}).pop(leaf, None)
    for section in NOT_FINGERPRINTED_SECTIONS:
        container.pop(section, None)
    if threads is None:
        threads = torch_thread_count()
    container.setdefault("runtime", {}).update(device=str(device), threads=threads, dtype=dtype)
    if layout is not None and layout.split:  # FSDP alone changes no frame: a sharded render resumes in one process
        container["runtime"]["layout"] = {"guidance": layout.guidance, "sequence": layout.sequence}
    return container


def fingerprint(
    image: Path, audio: Path, prompt: str, settings: dict[str, Any], weight_files: list[Path]
) -> dict[str, str]:
    """What a resumed render must share with the stopped one: input bytes, prompt, the resolved config
    (``settings``: ``fingerprinted_settings``) and the ``weight_files`` (``weights_signature``; none for random
    weights)."""
    found = {
        "image": file_digest(image),
        "audio": file_digest(audio),
        "prompt": text_digest(prompt),
        "config": text_digest(json.dumps(settings, sort_keys=True)),
    }
    if weight_files:
        found["weights"] = text_digest(json.dumps([weights_signature(f) for f in weight_files]))
    return found


SIGNATURE_BYTES = 1 << 20  # read from each end of a weights file for its signature


def weights_signature(file: Path) -> tuple[str, int, str]:
    """What tells a weights file from another, wherever it is installed: its name, size, and a digest of its first
    and last MiB (a safetensors header and the first and last tensors' bytes). Not its path or mtime: a render
    stopped on one node of a cluster resumes on another, whose copy of the same weights lies elsewhere or was
    written at another time; reading 2 MiB a file keeps this fast for weights of any size."""
    digest = hashlib.sha256()
    size = file.stat().st_size
    with open(file, "rb") as handle:
        digest.update(handle.read(SIGNATURE_BYTES))
        if size > 2 * SIGNATURE_BYTES:
            handle.seek(size - SIGNATURE_BYTES)
        digest.update(handle.read(SIGNATURE_BYTES))
    return file.name, size, digest.hexdigest()


def changed_settings(before: dict[str, Any], now: dict[str, Any], shown: int = 3) -> str:
    """The config keys whose values differ, for a refused --resume: ``runtime.dtype was bfloat16, is float32; seed
    was 0, is 3`` (the first ``shown`` by name, then how many more)."""

    def flat(tree: Any, prefix: str = "") -> dict[str, Any]:
        if not isinstance(tree, dict) or not tree:
            return {prefix: tree}
        return {key: value for name, child in tree.items() for key, value in flat(child, f"{prefix}{name}.").items()}

    def said(values: dict[str, Any], key: str) -> str:
        return json.dumps(values[key]) if key in values else "unset"

    old, new = flat(before), flat(now)
    unset = object()
    keys = [key for key in sorted(set(old) | set(new)) if old.get(key, unset) != new.get(key, unset)]
    told = [f"{key.rstrip('.')} was {said(old, key)}, is {said(new, key)}" for key in keys[:shown]]
    more = f"; and {len(keys) - shown} more" if len(keys) > shown else ""
    return "; ".join(told) + more


def resume_point(
    store: ResumeStore, found: dict[str, str], partial: Path, warn: Callable[[str], None],
    settings: dict[str, Any] | None = None,
) -> RenderCheckpoint | None:
    """Load ``store`` and pick the checkpoint to continue from (None: start over); the partial MP4 becomes a part.
    ``settings``: this render's ``fingerprinted_settings``, to name the keys that changed when the config did."""
    output_name = partial.with_name(f"{store.folder.name[: -len('.resume')]}.mp4")
    if not store.exists():
        warn(f"note: --resume: no stopped render of '{output_name}' to resume; rendering from the start")
        return None
    try:
        store.load()
    except OtherFormatError as error:
        warn(f"note: --resume: '{store.folder}' was written by another avatargen version ({error}); rendering from "
             "the start")  # fmt: skip
        return None
    changed = store.mismatch(found)
    if changed:
        which = ""
        if "config" in changed and store.settings is not None and settings is not None:
            which = f" ({changed_settings(store.settings, settings)})"
        named = changed[0] if len(changed) == 1 else f"{', '.join(changed[:-1])} and {changed[-1]}"
        what = f"the {named} {'differs' if len(changed) == 1 else 'differ'} from the stopped render's{which}"
        raise ResumeMismatchError(
            f"cannot resume '{output_name}': {what}; resume with the same inputs and config, or render without "
            "--resume to start over", what,
        )  # fmt: skip
    on_disk = 0
    if partial.is_file() and not partial.is_symlink():
        found_id = part_id_of(partial)  # None: killed before its header, nothing in it to splice
        if found_id is not None and found_id != store.part_id:
            raise BadInputError(f"cannot resume '{output_name}': '{partial}' is not the video of its stopped render "
                                "(another video is at that name); move it away to keep it, or render without "
                                "--resume to start over")  # fmt: skip
        on_disk = salvage_part(partial) if found_id is not None else 0
    chosen = store.choose(on_disk)
    if chosen is None:
        warn(f"note: --resume: no checkpoint of '{output_name}' is covered by its saved video; rendering from the start")
        return None
    if (partial.is_file() and not partial.is_symlink()):
        store.add_part(partial, chosen["frames"])
    tensors = store.read_state(chosen)  # its bytes checked against the sha256 recorded when it was written
    try:
        return RenderCheckpoint.from_tensors(tensors, chosen["meta"])
    except (KeyError, TypeError, ValueError, AttributeError) as error:  # a hand-edited resume.json
        raise BadInputError(f"resume state '{store.folder}' is unreadable (checkpoint {chosen['frames']}: "
                            f"{error.__class__.__name__} {error}); render without --resume to start over") from None


def checkpoint_saver(store: ResumeStore, after: Callable[[], None] | None = None,
                     written: Callable[[], int] | None = None) -> Callable[[RenderCheckpoint], None]:  # fmt: skip
    """Saves each checkpoint into ``store``, then calls ``after`` (e.g. a copy of the resume state to a bucket);
    ``written()``: the frames this run handed to the encoder so far (``ResumeStore.save`` keeps what covers them)."""

    def save(checkpoint: RenderCheckpoint) -> None:
        try:
            store.save(*checkpoint.to_tensors(), written() if written is not None else None)
        except OSError as err:
            if err.errno in (errno.ENOSPC, errno.EFBIG):
                raise disk_full_error(store.folder, err.strerror) from None
            raise
        except SafetensorError as err:  # safetensors reports I/O errors as its own type: "... (os error 27)"
            if f"os error {errno.EFBIG})" in str(err) or f"os error {errno.ENOSPC})" in str(err):
                raise disk_full_error(store.folder, first_line(err)) from None
            raise
        if after is not None:
            after()

    return save
