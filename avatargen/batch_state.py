"""What the out-dir of a batch says about each job: done, running (where), failed (why) or pending.

Workers share nothing but the out-dir, so the state of a job is its files beside the output ``OUT.mp4``:

    OUT.mp4           finished (renders rename their partial onto it only on success)
    OUT.lock          locked by a live worker (``io.output_lock``: pid and host inside; the kernel frees it on death)
    OUT.failed.json   failed for good: reason, exit code, worker; not retried unless ``--retry-failed``
    OUT.resume/       stopped or killed mid-job: the next worker to claim it resumes from its last checkpoint

A row of the jobs file that cannot run (not JSON, a missing key, an output outside the out-dir, ...) has no output of
its own to lock, so it is claimed and failed under a hidden name of the out-dir, ``.bad-row-N-HASH`` (N its job
number, HASH of its problem): the one worker that claims it reports it, every other finds it failed.

``batch_jobs.json`` in the out-dir lists every job's output (written by each worker at start), so
``avatargen batch status DIR`` also knows the jobs nobody has started.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from avatargen.errors import BadInputError
from avatargen.io.output_lock import is_locked, lock_path_for, read_holder
from avatargen.io.owned_names import is_avatargen_resume_folder
from avatargen.io.resume_store import resume_folder_for

MANIFEST_NAME = "batch_jobs.json"
STATES = ("done", "running", "failed", "pending")


def bad_row_claim(out_dir: Path, index: int, problem: str) -> Path:
    """The name a row that cannot run is locked and failed under (``.bad-row-N-HASH.lock`` / ``.failed.json`` in
    ``out_dir``); a row whose problem changed is a new claim, so it is reported again."""
    digest = hashlib.sha1(problem.encode("utf-8")).hexdigest()[:12]
    return out_dir / f".bad-row-{index}-{digest}.mp4"


def failed_record_for(output: Path) -> Path:
    """Where a job that failed for good records why: ``OUT.failed.json`` beside its output."""
    return output.with_name(f"{output.stem}.failed.json")


def write_atomic(path: Path, text: str) -> None:
    # A short temporary name: an output whose name the file system just takes must not fail its failure record
    digest = hashlib.sha1(path.name.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    tmp = path.with_name(f".{digest}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def record_failure(output: Path, error: str, exit_code: int) -> None:
    """Mark the job of ``output`` failed for good (its worker still holds the job's lock)."""
    record = {"error": error, "exit_code": exit_code, "host": socket.gethostname(), "pid": os.getpid(), "time": time.time()}
    write_atomic(failed_record_for(output), json.dumps(record))


def read_failure(output: Path) -> dict[str, Any] | None:
    """The failure recorded for ``output``'s job, or None (also for a record that cannot be read)."""
    try:
        record = json.loads(failed_record_for(output).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


@dataclass
class JobState:
    """One job as the out-dir shows it now."""

    output: str
    state: str  # done | running | failed | pending
    host: str | None = None  # running: the worker
    pid: int | None = None
    error: str | None = None  # failed: why
    resumable: bool = False  # pending or running with resume state: the next claim continues it


def bad_row_number(claim: Path) -> int | None:
    """N of a ``bad_row_claim`` name (``.bad-row-N-HASH.mp4``), or None for a job's own output."""
    parts = claim.name.split("-")
    if claim.name.startswith(".bad-row-") and len(parts) == 4 and parts[2].isdigit():
        return int(parts[2])
    return None


def job_state(output: Path) -> JobState:
    row = bad_row_number(output)
    if row is not None:  # a row that cannot run: failed once claimed, pending (not yet tried) before
        failure = read_failure(output)
        label = f"(job {row}: its row of the jobs file cannot run)"
        if failure is None:
            return JobState(label, "pending")
        return JobState(label, "failed", str(failure.get("host")), failure.get("pid"), str(failure.get("error")))
    if output.is_file():
        return JobState(str(output), "done")
    if is_locked(output):
        holder = read_holder(lock_path_for(output))
        return JobState(str(output), "running", holder.host, holder.pid, resumable=is_avatargen_resume_folder(resume_folder_for(output)))
    failure = read_failure(output)
    if failure is not None:
        return JobState(str(output), "failed", str(failure.get("host")), failure.get("pid"), str(failure.get("error")))
    return JobState(str(output), "pending", resumable=is_avatargen_resume_folder(resume_folder_for(output)))


def write_manifest(out_dir: Path, outputs: list[Path]) -> None:
    # absolute, so that `batch status` works from any folder; an output named twice (a duplicate row) is listed once
    absolute = list(dict.fromkeys(os.path.realpath(o) for o in outputs))
    write_atomic(out_dir / MANIFEST_NAME, json.dumps({"outputs": absolute}, indent=1))


def batch_status(out_dir: Path) -> list[JobState]:
    """Every job of the batch in ``out_dir``: those its manifest lists, and any other output found there."""
    if not out_dir.is_dir():
        raise BadInputError(f"out-dir '{out_dir}' does not exist; give the --out-dir of a batch")
    outputs: list[Path] = []
    try:
        outputs = [Path(o) for o in json.loads((out_dir / MANIFEST_NAME).read_text())["outputs"]]
    except (OSError, ValueError, KeyError, TypeError):
        pass  # no manifest: what the files say
    outputs = [Path(o) for o in dict.fromkeys(os.path.realpath(o) for o in outputs)]  # each job once
    seen = set(outputs)
    for pattern, suffix in (("*.mp4", ".mp4"), ("*.lock", ".lock"), ("*.failed.json", ".failed.json")):
        for found in sorted(out_dir.rglob(pattern)):
            if found.name.startswith(".") or found.name.endswith(".partial.mp4") or ".resume" in found.parent.name:
                continue
            output = Path(os.path.realpath(found.with_name(found.name[: -len(suffix)] + ".mp4")))
            if output not in seen:
                seen.add(output)
                outputs.append(output)
    return [job_state(output) for output in outputs]


def print_status(states: list[JobState], out_dir: Path, as_json: bool) -> None:
    counts = {state: sum(s.state == state for s in states) for state in STATES}
    if as_json:
        print(json.dumps({"out_dir": str(out_dir), **counts, "jobs": [asdict(s) for s in states]}))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"avatargen batch status: {out_dir}")
    for name in ("output", "state", "where / why"):
        table.add_column(name, overflow="fold")
    colour = {"done": "green", "running": "yellow", "failed": "red", "pending": "cyan"}
    for s in states:
        where = f"{s.host} pid {s.pid}" if s.state == "running" else (s.error or "")
        if s.resumable:
            where = (where + "; " if where else "") + "resumes from its last checkpoint"
        table.add_row(s.output, f"[{colour[s.state]}]{s.state}[/]", where)
    console = Console(width=160)
    console.print(table)
    console.print(", ".join(f"{counts[state]} {state}" for state in STATES))
