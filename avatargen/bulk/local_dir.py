"""An out-dir on a local or shared file system: a job's state is its files beside its output ``OUT.mp4``:

    OUT.mp4           finished (renders rename their partial onto it only on success)
    OUT.lock          claimed by a live worker (``io.output_lock``: pid and host inside; the kernel frees it on death)
    OUT.failed.json   failed for good: reason, exit code, worker; not retried unless ``--retry-failed``
    OUT.resume/       stopped or killed mid-job: the next worker to claim it resumes from its last checkpoint

Across hosts this holds only where the shared file system carries ``flock`` (docs/batch.md, "What the shared file
system must provide").
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from avatargen.bulk.jobs import Job, bad_row_number
from avatargen.bulk.outdir import FAILED_SUFFIX, failed_name, failure_record, is_batch_side_file, parse_failure
from avatargen.bulk.status import MANIFEST_NAME, JobState, bad_row_label
from avatargen.errors import BadInputError
from avatargen.io.output_lock import OutputLock, is_locked, lock_path_for, read_holder
from avatargen.io.owned_names import (OVERWRITE_FIX, foreign_reason, is_avatargen_mp4, is_avatargen_resume_folder,
                                      remove_name, resume_folder_for)


def write_atomic(path: Path, data: bytes | Iterable[bytes]) -> None:
    """Write ``path`` under a short temporary name, then move it into place (readers see the old or the new file)."""
    digest = hashlib.sha1(path.name.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    tmp = path.with_name(f".{digest}.{os.getpid()}.tmp")
    with open(tmp, "wb") as file:
        for chunk in [data] if isinstance(data, bytes) else data:
            file.write(chunk)
    os.replace(tmp, path)


class FileClaim:
    """A job's claim on a file system: the flock of ``OUT.lock`` (``lock`` is passed to the render)."""

    def __init__(self, lock: OutputLock):
        self.lock = lock

    def release(self) -> None:
        self.lock.release()

    def on_lost(self, callback: Callable[[], None]) -> None:
        """A flock is not lost while its holder lives."""


class LocalOutDir:
    """``OutDir`` on a file system (see the module's docstring)."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def prepare(self, side_names: list[str], overwrite: bool) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise BadInputError(
                f"cannot write to --out-dir '{self.root}' ({err.strerror}); choose a writable folder"
            ) from None
        for name in side_names:
            path = self.root / name
            if overwrite:
                continue
            if path.is_symlink() or path.is_dir() or (path.exists() and not is_batch_side_file(_head(path))):
                raise BadInputError(f"'{path}' is not a file avatargen batch wrote; the batch would replace it: "
                                    f"{OVERWRITE_FIX}")  # fmt: skip

    def write_side(self, name: str, chunks: Iterable[bytes]) -> None:
        path = self.root / name
        if path.is_symlink() or path.is_dir():
            remove_name(path)  # --overwrite: a link is replaced as a link, never written through
        write_atomic(path, chunks)

    def finished(self, output: Path, overwrite: bool = False) -> bool:
        # Any file: a video from before avatargen marked its files carries no mark (docs/owned-names.md).
        return output.is_file() and (not overwrite or is_avatargen_mp4(output))

    def failure(self, claim: Path) -> dict[str, Any] | None:
        try:
            return parse_failure(claim.with_name(failed_name(claim)).read_bytes())
        except OSError:
            return None

    def try_claim(self, job: Job, owner: str) -> FileClaim | None:
        claim = job.claimed_as
        try:
            claim.parent.mkdir(parents=True, exist_ok=True)
            if job.overwrite and foreign_reason(lock_path_for(claim), "lock") is not None:
                remove_name(lock_path_for(claim))  # --overwrite: a user's file or a link at OUT.lock (a link as a link)
            record = claim.with_name(failed_name(claim))
            if not job.overwrite and (
                record.is_symlink() or record.is_dir() or (record.is_file() and not is_batch_side_file(_head(record)))
            ):
                raise BadInputError(
                    f"'{record}' is not a file avatargen batch wrote; this job would replace it: {OVERWRITE_FIX}"
                )
            lock = OutputLock(claim)
            return FileClaim(lock) if lock.try_acquire() else None
        except OSError as err:
            raise BadInputError(f"cannot write to output folder '{claim.parent}' ({err.strerror}); choose a writable "
                                "--out-dir") from None  # fmt: skip

    def record_failure(self, claim: Path, error: str, exit_code: int) -> None:
        record = claim.with_name(failed_name(claim))
        if record.is_symlink() or record.is_dir():
            remove_name(record)
        write_atomic(record, failure_record(error, exit_code, socket.gethostname(), os.getpid(), time.time()))

    def clear_failure(self, claim: Path) -> None:
        claim.with_name(failed_name(claim)).unlink(missing_ok=True)

    def resumable(self, output: Path) -> bool:
        return is_avatargen_resume_folder(resume_folder_for(output))

    def job_state(self, output: Path) -> JobState:
        row = bad_row_number(output)
        if row is not None:  # a row that cannot run: failed once claimed, pending (not yet tried) before
            failure = self.failure(output)
            if failure is None:
                return JobState(bad_row_label(row), "pending")
            return JobState(
                bad_row_label(row), "failed", str(failure.get("host")), failure.get("pid"), str(failure.get("error"))
            )
        if output.is_file():
            return JobState(str(output), "done")
        if is_locked(output):
            holder = read_holder(lock_path_for(output))
            return JobState(str(output), "running", holder.host, holder.pid, resumable=self.resumable(output))
        failure = self.failure(output)
        if failure is not None:
            return JobState(
                str(output), "failed", str(failure.get("host")), failure.get("pid"), str(failure.get("error"))
            )
        return JobState(str(output), "pending", resumable=self.resumable(output))

    def states(self) -> list[JobState]:
        """Every job of the batch in the folder: those its manifest lists, and any other output found there."""
        if not self.root.is_dir():
            raise BadInputError(f"out-dir '{self.root}' does not exist; give the --out-dir of a batch")
        outputs: list[Path] = []
        try:
            outputs = [Path(o) for o in json.loads((self.root / MANIFEST_NAME).read_text())["outputs"]]
        except (OSError, ValueError, KeyError, TypeError):
            pass  # no manifest: what the files say
        outputs = [Path(o) for o in dict.fromkeys(os.path.realpath(o) for o in outputs)]  # each job once
        seen = set(outputs)
        for pattern, suffix in (("*.mp4", ".mp4"), ("*.lock", ".lock"), ("*" + FAILED_SUFFIX, FAILED_SUFFIX)):
            for found in sorted(self.root.rglob(pattern)):
                if found.name.startswith(".") or found.name.endswith(".partial.mp4") or ".resume" in found.parent.name:
                    continue
                output = Path(os.path.realpath(found.with_name(found.name[: -len(suffix)] + ".mp4")))
                if output not in seen:
                    seen.add(output)
                    outputs.append(output)
        return [self.job_state(output) for output in outputs]


def _head(path: Path) -> bytes:
    """The first 64 KiB of ``path`` (what ``is_batch_side_file`` reads)."""
    try:
        with open(path, "rb") as file:
            return file.read(65536)
    except OSError:
        return b"\x00"
