"""What became of each job: ``JobResult``, the exit code of a batch, ``batch_report.json`` and the summary.

Results are kept in a temporary file as they come (``ResultLog``: 8 bytes of memory a job), so a batch of millions
of jobs reports every one of them, in job order, without holding them all.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from array import array
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterator

from avatargen.bulk.jobs import Job
from avatargen.errors import EXIT_BAD_INPUT, EXIT_FAILURE, EXIT_OK

REPORT_NAME = "batch_report.json"
STATUSES = ("ok", "skipped", "failed", "stopped")
SUMMARY_ROWS = 40  # a longer batch's summary lists its failures first, then counts the rest


@dataclass
class JobResult:
    index: int
    status: str  # ok | skipped (finished before, or by another worker) | failed | stopped (a stop request; resumable)
    output: str
    image: str
    audio: str
    prompt: str
    overrides: list[str]
    rank: int
    seconds: float = 0.0
    frames: int | None = None
    error: str | None = None
    exit_code: int = EXIT_OK
    worker: str | None = None  # host:pid of the worker that rendered it, or failed it
    resumed_from: int | None = None  # the frame a resumed job continued from
    ran: bool = False  # this worker rendered (or tried) it; else it reports what it found
    attempts: int = 1  # tries it took in this run (a lost worker, a failure other than bad input: tried again)


def result_for(job: Job, rank: int, status: str, started: float, **extra: Any) -> JobResult:
    """A result of ``job`` begun at ``started`` (``time.perf_counter()``)."""
    audio = ";".join(str(a) for a in job.audio_files)
    text = lambda value: "" if value is None else str(value)  # noqa: E731
    return JobResult(job.index, status, text(job.output), text(job.image or job.video), audio, job.prompt,
                     job.overrides, rank, seconds=round(time.perf_counter() - started, 3), **extra)  # fmt: skip


def progress_line(job: Job, result: JobResult, who: str) -> str:
    """The line a worker prints for a job it ran."""
    if result.status == "failed":
        given = job.inputs_text()
        return f"{who}: job {job.index} failed{f' ({given})' if given else ''}: {result.error}"
    if result.status == "stopped":
        return (f"{who}: job {job.index} stopped at a chunk boundary; the next run continues it from its last "
                "checkpoint, if it made one")  # fmt: skip
    if result.status == "skipped":
        return f"{who}: job {job.index} dropped: {result.error}"
    resumed = f", resumed from frame {result.resumed_from}" if result.resumed_from else ""
    return f"{who}: job {job.index} ok: '{job.output}', {result.frames} frames in {result.seconds:.1f} s{resumed}"


def exit_code_of(codes: list[int]) -> int:
    """0 when no job failed; 2 if every failure was bad input or config; 1 otherwise."""
    if not codes:
        return EXIT_OK
    return EXIT_BAD_INPUT if all(c == EXIT_BAD_INPUT for c in codes) else EXIT_FAILURE


class ResultLog:
    """Every job's latest result, in a temporary file; ``counts`` and the failures' exit codes in memory."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile("w+b")
        self._offsets = array("q")
        self._status: dict[int, tuple[str, int]] = {}  # only failed and stopped jobs: (status, exit code)
        self.counts: Counter[str] = Counter()

    def add(self, result: JobResult) -> None:
        """Record ``result`` (replacing an earlier result of the same job)."""
        if result.index < len(self._offsets) and self._offsets[result.index] >= 0:
            self.counts[self.get(result.index).status] -= 1
        while len(self._offsets) <= result.index:
            self._offsets.append(-1)
        self._offsets[result.index] = self._file.seek(0, 2)
        self._file.write(json.dumps(asdict(result)).encode("utf-8", "surrogateescape") + b"\n")
        self.counts[result.status] += 1
        self._status.pop(result.index, None)
        if result.status in ("failed", "stopped"):
            self._status[result.index] = (result.status, result.exit_code)

    def get(self, index: int) -> JobResult:
        self._file.seek(self._offsets[index])
        return JobResult(**json.loads(self._file.readline()))

    def __len__(self) -> int:
        return sum(1 for offset in self._offsets if offset >= 0)

    def __iter__(self) -> Iterator[JobResult]:
        for index, offset in enumerate(self._offsets):
            if offset >= 0:
                yield self.get(index)

    def exit_code(self) -> int:
        return exit_code_of([code for status, code in self._status.values() if status == "failed"])

    def stopped(self) -> bool:
        return any(status == "stopped" for status, _ in self._status.values())

    def report_chunks(self, header: dict[str, Any]) -> Iterator[bytes]:
        """``batch_report.json``: ``header``'s keys, then ``jobs``, every result in job order, streamed."""
        head = json.dumps({**header, "jobs": []}, indent=2)
        yield head[: head.rindex("[") + 1].encode() + b"\n"
        for number, result in enumerate(self):
            yield (b",\n" if number else b"") + json.dumps(asdict(result)).encode("utf-8", "surrogateescape")
        yield b"\n  ]\n}\n"


def print_summary(log: ResultLog, report_name: str, out: Callable[[], Any] = lambda: sys.stdout) -> None:
    """A table of the jobs (failures first, at most ``SUMMARY_ROWS``), then the counts and where the report is."""
    from rich.console import Console
    from rich.table import Table

    rows = [r for r in log if r.status in ("failed", "stopped")][:SUMMARY_ROWS]
    rows += [r for r in log if r.status not in ("failed", "stopped")][: max(0, SUMMARY_ROWS - len(rows))]
    rows.sort(key=lambda r: r.index)
    table = Table(
        title=f"avatargen batch: {len(log)} job(s)" + (f", {len(rows)} shown" if len(rows) < len(log) else "")
    )
    for name in ("#", "status", "output", "frames", "seconds", "worker", "error"):
        table.add_column(name, overflow="fold")
    colour = {"ok": "green", "skipped": "cyan", "failed": "red", "stopped": "yellow"}
    for r in rows:
        worker = (r.worker or "") + (f" (rank {r.rank})" if r.rank else "")
        table.add_row(str(r.index), f"[{colour.get(r.status, 'white')}]{r.status}[/]", r.output,
                      "" if r.frames is None else str(r.frames), f"{r.seconds:.1f}", worker, r.error or "")  # fmt: skip
    console = Console(file=out(), width=160)
    console.print(table)
    counts = ", ".join(f"{log.counts[s]} {s}" for s in STATUSES if log.counts[s] or s != "stopped")
    console.print(f"{counts}; report: {report_name}")
