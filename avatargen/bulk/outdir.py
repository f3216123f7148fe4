"""An out-dir as the workers of a batch share it: what says a job is finished, claimed, failed or resumable.

Two kinds, one contract (``OutDir``), so that every engine runs jobs the same way (``bulk.runner``):

- ``LocalOutDir``, a folder on a local or shared file system (``bulk.local_dir``): a job's state is its files beside
  ``OUT.mp4``; a claim is ``flock`` on ``OUT.lock``, which the kernel frees when its holder dies.
- ``BucketOutDir``, a prefix in S3-compatible storage (``bulk.bucket_dir``): the same names as objects; a claim is
  ``OUT.lock`` created with a conditional write and renewed by its holder, free again once it is older than
  ``storage.lease_s``.

Either way ``OUT.mp4`` appears only complete (a rename, an upload), ``OUT.failed.json`` records a failure for good,
and ``OUT.resume/`` holds what a stopped or killed job resumes from.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterable, Protocol

from avatargen.bulk.jobs import Job
from avatargen.bulk.locations import Where
from avatargen.bulk.status import MADE_BY, JobState

FAILED_SUFFIX = ".failed.json"


class Claim(Protocol):
    """A job's claim, held while it renders."""

    def release(self) -> None: ...

    def on_lost(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` if the claim is lost while held (a bucket claim another worker took over)."""


class OutDir(Protocol):
    """Where a batch's outputs, claims and side files are (see the module's docstring)."""

    root: Where

    def prepare(self, side_names: list[str], overwrite: bool) -> None:
        """Check the out-dir can be written (make it); refuse side files at ``side_names`` a user made."""

    def write_side(self, name: str, chunks: Iterable[bytes]) -> None:
        """Write the side file ``name`` (a manifest, the report) whole, replacing the old one at once."""

    def finished(self, output: Where, overwrite: bool = False) -> bool:
        """Whether ``output``'s finished video is there (the job is skipped); with ``overwrite`` only avatargen's
        own: a user's file is rendered over. BadInputError for a user's object in a bucket without ``overwrite``."""

    def failure(self, claim: Where) -> dict[str, Any] | None:
        """The failure recorded for ``claim``'s job, or None."""

    def try_claim(self, job: Job, owner: str) -> Claim | None:
        """Claim ``job`` for ``owner``; None while a live worker holds it. BadInputError for a user's file there."""

    def record_failure(self, claim: Where, error: str, exit_code: int) -> None: ...

    def clear_failure(self, claim: Where) -> None: ...

    def resumable(self, output: Where) -> bool:
        """Whether a stopped or killed render of ``output`` left state to resume from."""

    def states(self) -> list[JobState]:
        """Every job of the batch, for ``avatargen batch status``."""


def failed_name(output: Where) -> str:
    """``OUT.failed.json``, the record of a job failed for good, beside its output."""
    return f"{output.stem}{FAILED_SUFFIX}"


def failure_record(error: str, exit_code: int, host: str, pid: int, when: float) -> bytes:
    return json.dumps({"made_by": MADE_BY, "error": error, "exit_code": exit_code, "host": host, "pid": pid,
                       "time": when}).encode()  # fmt: skip


def parse_failure(data: bytes | None) -> dict[str, Any] | None:
    try:
        record = json.loads(data) if data else None
    except ValueError:
        return None
    return record if isinstance(record, dict) and "error" in record else None


def is_batch_side_file(head: bytes) -> bool:
    """Whether a file that starts with ``head`` (up to 64 KiB of it) is a side file a batch wrote -- a report, a
    manifest, a failure record; an empty one counts too: nothing to lose -- so that a batch may replace it."""
    if not head.strip() or MADE_BY.encode() in head[:256] or head.startswith(b'{\n  "jobs_file": '):
        return True
    try:
        parsed = json.loads(head)  # written before side files carried the mark
    except ValueError:
        return False
    return isinstance(parsed, dict) and (
        set(parsed) == {"outputs"} or {"error", "exit_code", "host", "pid"} <= set(parsed)
    )
