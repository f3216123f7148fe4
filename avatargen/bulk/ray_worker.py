"""A Ray worker of ``avatargen batch --ray``: one long-lived actor process that renders the jobs the driver hands
it, one after another, keeping its models loaded from job to job (``bulk.runner``; the same job runner as the
file-lock workers). Ray places it where its resources are (``batch.ray.num_cpus``, ``batch.ray.num_gpus``) and,
when its node is lost, starts it again on another; the driver then gives the lost job to a live worker, which
resumes it from its last checkpoint.

This module imports no Ray: the driver wraps ``RenderWorker`` with ``ray.remote`` (``bulk.ray_driver``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from avatargen.bulk.jobs import Job
from avatargen.bulk.locations import Where
from avatargen.bulk.results import JobResult
from avatargen.bulk.runner import WORKER, JobContext, claim_and_run
from avatargen.resume import StopRequests


@dataclass(frozen=True)
class WorkerSettings:
    """What every job of a batch shares, sent to each worker once."""

    overrides: tuple[str, ...]
    out_dir: Where
    owner: str  # the driver's run: the bucket claims name it, so it may take back a job whose worker it lost
    confine: Where | None
    retry_before: float | None
    resume_command: str


@dataclass
class WorkerAnswer:
    """A job's result (None: another run's worker holds it) and what the render said meanwhile."""

    result: JobResult | None
    notes: list[str]


class RenderWorker:
    """One worker: ``run`` renders a job (in one of the actor's two threads), ``stop`` asks it to stop at the next
    chunk (from the other); a stopped job keeps its resume state and comes back with status ``stopped``."""

    def __init__(self, settings: WorkerSettings):
        from avatargen.bulk.batch_files import open_out_dir
        from avatargen.config.loader import load_config, to_config

        self.settings = settings
        self.out_dir = open_out_dir(settings.out_dir, to_config(load_config(list(settings.overrides))))
        self._stop: StopRequests | None = None
        self._lock = threading.Lock()
        self._stopping = False

    def where(self) -> str:
        """host:pid of this worker (also how the driver learns that a restarted worker is up)."""
        return WORKER

    def run(self, job: Job, attempt: int, last_attempt: bool) -> WorkerAnswer:
        """Claim and render ``job``; a failure other than bad input is recorded for good only on the last attempt
        (the driver tries it again before that)."""
        notes: list[str] = []
        settings = self.settings
        stop = StopRequests()
        with self._lock:
            self._stop = stop
            if self._stopping:
                stop.request()
        ctx = JobContext(list(settings.overrides), self.out_dir, settings.owner, notes.append, confine=settings.confine,
                         retry_before=settings.retry_before, resume_command=settings.resume_command, stop=stop)  # fmt: skip
        try:
            result = claim_and_run(job, ctx, record_failure=lambda result: last_attempt)
        finally:
            with self._lock:
                self._stop = None
        if result is not None:
            result.attempts = attempt
        return WorkerAnswer(result, notes)

    def stop(self) -> None:
        """Stop the job being rendered at its next chunk boundary, and any job handed over after this."""
        with self._lock:
            self._stopping = True
            if self._stop is not None:
                self._stop.request()
