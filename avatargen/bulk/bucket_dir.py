"""An out-dir in S3-compatible object storage: the same names as on a file system (``bulk.local_dir``), as objects
under a key prefix, decided by conditional writes instead of ``flock``:

    OUT.mp4           finished: uploaded once the render is complete (an upload is all or nothing)
    OUT.lock          claimed: created only where there is none (``If-None-Match: *``); its holder renews it every
                      quarter of ``storage.lease_s`` (``If-Match``: only its own version); one older than
                      ``storage.lease_s`` on the store's clock is free (its worker died), and whoever replaces that
                      version first (``If-Match`` again) holds it
    OUT.failed.json   failed for good (reason, exit code, worker)
    OUT.resume/       the resume state, copied there as the render checkpoints (``bulk.mirror``)

A claim also names its owner -- a batch run, or a worker process -- and an owner may take back its own claim at once:
a Ray driver does so for a job whose worker Ray reported dead, without waiting for the lease to run out; so may
anyone for a claim whose holder ran on the same host and is gone. A worker that finds its claim replaced stops its
render at the next chunk and writes nothing more.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from avatargen.bulk.jobs import Job, bad_row_number
from avatargen.bulk.locations import ObjectUrl
from avatargen.bulk.outdir import FAILED_SUFFIX, failed_name, failure_record, is_batch_side_file, parse_failure
from avatargen.bulk.s3 import Store
from avatargen.bulk.status import MADE_BY, MANIFEST_NAME, JobState, bad_row_label
from avatargen.errors import BadInputError
from avatargen.io.output_lock import OutputLockedError
from avatargen.io.owned_names import OVERWRITE_FIX

OWNER_KEY = "avatargen-owner"  # object metadata naming who wrote a side file


def lock_url(target: ObjectUrl) -> ObjectUrl:
    return target.with_name(f"{target.stem}.lock")


def resume_url(output: ObjectUrl) -> ObjectUrl:
    return output.with_name(f"{output.stem}.resume")


class BucketClaim:
    """The claim of ``target``'s job in a bucket (see the module's docstring)."""

    def __init__(self, store: Store, target: ObjectUrl, owner: str, lease_s: float):
        self.store, self.target, self.owner, self.lease_s = store, target, owner, lease_s
        self.url = lock_url(target)
        self.etag: str | None = None
        self.lost = False
        self._callbacks: list[Callable[[], None]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _body(self) -> bytes:
        return json.dumps({"owner": self.owner, "host": socket.gethostname(), "pid": os.getpid(),
                           "started": time.time()}).encode()  # fmt: skip

    def holder(self) -> tuple[dict[str, Any], str, float] | None:
        """The claim there now: its holder's record, version tag and age in seconds; None where there is none."""
        info = self.store.head(self.url)
        found = self.store.read(self.url) if info is not None else None
        if info is None or found is None:
            return None
        try:
            record = json.loads(found[0])
        except ValueError:
            record = {}
        return (record if isinstance(record, dict) else {}), found[1], info.age_s

    def try_acquire(self) -> bool:
        """Take the claim if it is free, stale, or this owner's; never waits."""
        for _ in range(5):  # the claim changed between our looks (released, renewed): look again
            self.etag = self.store.put(self.url, self._body(), if_none_match=True)
            if self.etag is not None:
                break
            held = self.holder()
            if held is None:
                continue
            record, etag, age = held
            if record.get("owner") != self.owner and age <= self.lease_s and not _holder_gone(record):
                return False
            self.etag = self.store.put(self.url, self._body(), if_match=etag)  # whoever replaces that version first
            if self.etag is not None:
                break
        if self.etag is None:
            return False
        self._thread = threading.Thread(target=self._renew, name=f"claim {self.target.name}", daemon=True)
        self._thread.start()
        return True

    def acquire(self) -> None:
        if not self.try_acquire():
            held = self.holder()
            who = (
                f"avatargen pid {held[0].get('pid')} on host {held[0].get('host')}"
                if held
                else "another avatargen process"
            )
            raise OutputLockedError(f"'{self.target}' is being written by {who}; wait for it to finish or stop it (its "
                                    f"claim '{self.url}' is free {self.lease_s:g} s after that process ends)")  # fmt: skip

    def _renew(self) -> None:
        while not self._stop.wait(self.lease_s / 4):
            try:
                etag = self.store.put(self.url, self._body(), if_match=self.etag)
            except Exception:  # noqa: BLE001 - the store unreachable for a moment: try again at the next beat
                continue
            if etag is None:  # another worker holds it now (this one was thought dead): stop writing
                self._lose()
                return
            self.etag = etag

    def _lose(self) -> None:
        self.lost = True
        for callback in self._callbacks:
            callback()

    def on_lost(self, callback: Callable[[], None]) -> None:
        self._callbacks.append(callback)
        if self.lost:
            callback()

    def verify(self) -> bool:
        """Whether the claim is still this holder's version (asked before each write of the job's state)."""
        if self.lost:
            return False
        info = self.store.head(self.url)
        if info is None or info.etag != self.etag:
            self._lose()
            return False
        return True

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self.etag is not None and not self.lost:
            self.store.delete(self.url, if_match=self.etag)
        self.etag = None


def _holder_gone(record: dict[str, Any]) -> bool:
    """Whether the claim's holder ran on this host and its process is gone (no need to wait for the lease then)."""
    pid = record.get("pid")
    if record.get("host") != socket.gethostname() or not isinstance(pid, int) or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


class BucketOutDir:
    """``OutDir`` in a bucket (see the module's docstring)."""

    def __init__(self, store: Store, root: ObjectUrl, lease_s: float):
        self.store, self.root, self.lease_s = store, root, lease_s

    def prepare(self, side_names: list[str], overwrite: bool) -> None:
        self.store.check_bucket(self.root)
        for name in [] if overwrite else side_names:
            url = self.root / name
            found = self.store.read(url)
            if found is not None and not is_batch_side_file(found[0][:65536]):
                raise BadInputError(f"'{url}' is not an object avatargen batch wrote; the batch would replace it: "
                                    f"{OVERWRITE_FIX}")  # fmt: skip

    def write_side(self, name: str, chunks: Iterable[bytes]) -> None:
        with tempfile.NamedTemporaryFile(prefix="avatargen-", suffix=".json") as file:
            for chunk in chunks:
                file.write(chunk)
            file.flush()
            self.store.upload(Path(file.name), self.root / name, {OWNER_KEY: MADE_BY.replace(" ", "-")})

    def finished(self, output: ObjectUrl, overwrite: bool = False) -> bool:
        found = self.store.head(output)
        ours = found is not None and found.made_by_avatargen
        if found is not None and not ours and not overwrite:
            raise BadInputError(f"'{output}' is an object avatargen did not write; this job would replace it: "
                                f"{OVERWRITE_FIX}")  # fmt: skip
        return ours

    def failure(self, claim: ObjectUrl) -> dict[str, Any] | None:
        found = self.store.read(claim.with_name(failed_name(claim)))
        return parse_failure(found[0]) if found is not None else None

    def try_claim(self, job: Job, owner: str) -> BucketClaim | None:
        record = job.claimed_as.with_name(failed_name(job.claimed_as))
        found = self.store.read(record)
        if found is not None and not job.overwrite and not is_batch_side_file(found[0][:65536]):
            raise BadInputError(
                f"'{record}' is not an object avatargen batch wrote; this job would replace it: {OVERWRITE_FIX}"
            )
        claim = BucketClaim(self.store, job.claimed_as, owner, self.lease_s)
        return claim if claim.try_acquire() else None

    def record_failure(self, claim: ObjectUrl, error: str, exit_code: int) -> None:
        self.store.put(claim.with_name(failed_name(claim)), failure_record(error, exit_code, socket.gethostname(),
                                                                           os.getpid(), time.time()))  # fmt: skip

    def clear_failure(self, claim: ObjectUrl) -> None:
        self.store.delete(claim.with_name(failed_name(claim)))

    def resumable(self, output: ObjectUrl) -> bool:
        return self.store.head(resume_url(output) / "resume.json") is not None

    def states(self) -> list[JobState]:
        """Every job under the prefix: those the manifest lists, and any other output found there (one listing)."""
        self.store.check_bucket(self.root)
        names: set[str] = set()
        resume: set[str] = set()
        for url, _ in self.store.list(self.root):
            relative = url.key[len(self.root.prefix) :]
            folder, _, leaf = relative.rpartition("/")
            if folder.endswith(".resume") and leaf == "resume.json":
                resume.add(f"{folder[: -len('.resume')]}.mp4")
            elif ".resume/" not in relative:
                names.add(relative)
        outputs: list[str] = []
        manifest = self.store.read(self.root / MANIFEST_NAME)
        if manifest is None and not names and not resume:  # a prefix with no object under it: a typo, most likely
            raise BadInputError(f"out-dir '{self.root}' does not exist (no object under it); give the --out-dir of a "
                                "batch")  # fmt: skip
        try:
            outputs = [str(o) for o in json.loads(manifest[0])["outputs"]] if manifest is not None else []
        except (ValueError, KeyError, TypeError):
            pass
        listed = [str(ObjectUrl.parse(o).key[len(self.root.prefix) :]) for o in outputs if o.startswith(str(self.root))]
        seen = set(listed)
        for name in sorted(names):
            for suffix in (".mp4", ".lock", FAILED_SUFFIX):
                if (
                    name.endswith(suffix)
                    and not name.rsplit("/", 1)[-1].startswith(".")
                    and not name.endswith(".partial.mp4")
                ):
                    output = name[: -len(suffix)] + ".mp4"
                    if output not in seen:
                        seen.add(output)
                        listed.append(output)
        return [self._state(name, names, name in resume) for name in listed]

    def _state(self, name: str, names: set[str], resumable: bool) -> JobState:
        url = self.root / name
        stem = name[: -len(".mp4")]
        row = bad_row_number(url)
        failure = self.failure(url) if f"{stem}{FAILED_SUFFIX}" in names else None
        if row is not None:
            if failure is None:
                return JobState(bad_row_label(row), "pending")
            return JobState(
                bad_row_label(row), "failed", str(failure.get("host")), failure.get("pid"), str(failure.get("error"))
            )
        if name in names:
            return JobState(str(url), "done")
        if f"{stem}.lock" in names:
            held = BucketClaim(self.store, url, "", self.lease_s).holder()
            if held is not None and held[2] <= self.lease_s and not _holder_gone(held[0]):
                return JobState(str(url), "running", held[0].get("host"), held[0].get("pid"), resumable=resumable)
        if failure is not None:
            return JobState(str(url), "failed", str(failure.get("host")), failure.get("pid"), str(failure.get("error")))
        return JobState(str(url), "pending", resumable=resumable)
