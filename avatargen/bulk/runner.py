"""One job, whichever engine hands it out: claim it in its out-dir, render it (resuming what a stopped or killed
worker left), record how it ended. The file-lock workers (``bulk.workers``) and the Ray workers
(``bulk.ray_worker``) both call ``claim_and_run``; nothing about a job is decided anywhere else.

Each job is one ``render`` in this process: models are built once and reused while the model config stays the same
(``pipeline.build.place_modules``'s cache), so a worker loads its model once for any number of jobs.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from avatargen.bulk.jobs import Job
from avatargen.bulk.local_dir import FileClaim
from avatargen.bulk.locations import ObjectUrl, Where, inside
from avatargen.bulk.outdir import Claim, OutDir
from avatargen.bulk.remote_render import ClaimLostError, render_anywhere
from avatargen.bulk.results import JobResult, result_for
from avatargen.bulk.s3 import StorageError
from avatargen.config.loader import load_config
from avatargen.io.console import RANDOM_WEIGHTS, kind_of
from avatargen.io.owned_names import OVERWRITE_FIX
from avatargen.errors import (
    EXIT_BAD_INPUT,
    EXIT_FAILURE,
    AvatarGenError,
    BadInputError,
    RenderInterrupted,
    ResumeMismatchError,
)
from avatargen.render import RenderRequest
from avatargen.resume import StopRequests
from avatargen.runtime.distributed import RankFailedError, solo_rank

WORKER = f"{socket.gethostname()}:{os.getpid()}"  # how reports and status name this worker


@dataclass
class JobContext:
    """What every job of one worker shares. ``owner``: who its bucket claims name (this worker, or the Ray driver's
    run); ``confine``: the folder every file of a job must be written in (``--out-dir``), None for anywhere;
    ``retry_before``: a job failed for good before this time is tried again (``--retry-failed``), None: never;
    ``stop``: stop requests from code (a Ray worker's), whose stops come back as results, not exceptions."""

    overrides: list[str]
    out_dir: OutDir
    owner: str
    warn: Callable[[str], None]
    rank: int = 0
    solo: bool = False  # a torchrun rank in spread mode: each job rendered by this rank alone
    confine: Where | None = None
    retry_before: float | None = None
    resume_command: str = ""
    stop: StopRequests | None = None
    notes: list[str] = field(default_factory=list)
    storage_down_since: float | None = None  # when object storage stopped answering this worker (None: it answers)
    storage_outage_s: float = 300.0  # how long a worker waits for it to come back before it gives up (exit 1)


def outside_out_dir(cfg: Any, out_dir: Where) -> str | None:
    """Why a job's config would write outside ``out_dir`` (an HLS ``output.publish`` target elsewhere), or None."""
    from pathlib import Path

    for target in cfg.output.publish:
        if "://" in str(target):
            continue
        if isinstance(out_dir, ObjectUrl) or not inside(Path(str(target)).expanduser(), out_dir):
            return (f"output.publish target '{target}' is outside --out-dir '{out_dir}'; publish inside it, or pass "
                    "--allow-outside-out-dir")  # fmt: skip
    return None


def run_job(job: Job, ctx: JobContext, claim: Claim | None = None, resume: bool = False) -> JobResult:
    """Render one job under ``claim``; every failure but a stop request or a broken group is caught and recorded in
    the result. ``resume`` continues the job's stopped render (or starts over if its inputs or config changed)."""
    started = time.perf_counter()
    if job.problem is not None:
        return result_for(
            job, ctx.rank, "failed", started, error=job.problem, exit_code=EXIT_BAD_INPUT, worker=WORKER, ran=True
        )
    try:
        if ctx.out_dir.finished(job.output, job.overwrite):
            return result_for(job, ctx.rank, "skipped", started)
        cfg = load_config([*ctx.overrides, *job.overrides])
        outside = outside_out_dir(cfg, ctx.confine) if ctx.confine is not None else None
        if outside is not None:
            raise BadInputError(outside)
        request = RenderRequest(image=job.image, audio=job.audio, output=job.output, prompt=job.prompt, video=job.video,
                                extra_audio=job.extra_audio, person_boxes=job.person_boxes, audio_type=job.audio_type)  # fmt: skip
        quiet = lambda message: None if kind_of(message) == RANDOM_WEIGHTS else ctx.warn(message)  # noqa: E731
        where = {"output_lock": claim.lock} if isinstance(claim, FileClaim) else {"claim": claim, "owner": ctx.owner}

        def attempt(resume: bool) -> dict[str, Any]:
            try:
                with solo_rank() if ctx.solo else contextlib.nullcontext():
                    return render_anywhere(request, cfg, warn=quiet, resume=resume, resume_command=ctx.resume_command,
                                           overwrite=job.overwrite, stop=ctx.stop, **where)  # fmt: skip
            except ResumeMismatchError as changed:  # the job changed since it was stopped: its state is of no use
                why = changed.what or str(changed)
                ctx.warn(f"note: job {job.index} ('{job.output}'): its stopped render is not resumed, {why}; rendering "
                         "it from the start")  # fmt: skip
                return attempt(False)

        report = attempt(resume)
    except RenderInterrupted as stopped:
        if ctx.stop is None or not ctx.stop.requested():
            raise  # the user stopped this worker: it ends here
        return result_for(job, ctx.rank, "stopped", started, error=str(stopped), exit_code=stopped.exit_code,
                          worker=WORKER, ran=True)  # fmt: skip
    except (RankFailedError, KeyboardInterrupt, StorageError):
        raise  # another rank died mid-job: the group cannot go on; the store is down: the job is tried again later
    except ClaimLostError as lost:  # another worker renders it now: this one's work on it is dropped
        return result_for(job, ctx.rank, "skipped", started, error=str(lost), worker=WORKER, ran=True)
    except AvatarGenError as err:
        return result_for(
            job, ctx.rank, "failed", started, error=str(err), exit_code=err.exit_code, worker=WORKER, ran=True
        )
    except Exception as err:  # a bug in one job must not stop the others: record it with its inputs
        return result_for(job, ctx.rank, "failed", started, error=f"unexpected {err.__class__.__name__}: {err}",
                          exit_code=EXIT_FAILURE, worker=WORKER, ran=True)  # fmt: skip
    return result_for(job, ctx.rank, "ok", started, frames=report["frames"], worker=WORKER,
                      resumed_from=report["resumed_from"], ran=True)  # fmt: skip


def failed_before(job: Job, ctx: JobContext) -> JobResult | None:
    """The job's recorded failure as a result, unless there is none or it is to be retried: ``--retry-failed``, or
    ``--overwrite`` where the failure was a name of the job's holding what avatargen did not write (its fix)."""
    failure = ctx.out_dir.failure(job.claimed_as)
    if failure is None or (ctx.retry_before is not None and float(failure.get("time", 0)) < ctx.retry_before):
        return None
    if job.overwrite and OVERWRITE_FIX in str(failure.get("error")):
        return None
    return result_for(job, ctx.rank, "failed", time.perf_counter(), error=str(failure.get("error")),
                      exit_code=int(failure.get("exit_code", EXIT_FAILURE)), worker=f"{failure.get('host')}:{failure.get('pid')}")  # fmt: skip


def claim_and_run(job: Job, ctx: JobContext, record_failure: Callable[[JobResult], bool] = lambda result: True
                  ) -> JobResult | None:  # fmt: skip
    """Run ``job`` if it is this worker's to run; its result, or None while another live worker holds it.

    A row that cannot run is claimed like a job (under its hidden name, ``jobs.bad_row_claim``), so one worker
    reports it and the others find it failed. A failure is recorded for good (``OUT.failed.json``) where
    ``record_failure(result)`` says so (the Ray engine first retries what is not bad input). Object storage that
    fails under the job (a ``StorageError``) records nothing: the job is given back (None) and taken again when the
    store answers (``_storage_down``)."""
    try:
        return _claim_and_run(job, ctx, record_failure, time.perf_counter())
    except StorageError as down:  # nothing is recorded: the job is taken again once the store answers
        return _storage_down(ctx, down)


def _storage_down(ctx: JobContext, down: StorageError) -> None:
    """Object storage failed under a job: the job is given back (None: as if another worker held it) and tried
    again, for up to ``ctx.storage_outage_s`` of outage; then ``down`` ends the worker (exit 1)."""
    now = time.monotonic()
    if ctx.storage_down_since is None:
        ctx.storage_down_since = now
        ctx.warn(f"warning: {down}; the job is tried again when the store answers (for up to "
                 f"{ctx.storage_outage_s:g} s)")  # fmt: skip
    if now - ctx.storage_down_since > ctx.storage_outage_s:
        raise down
    return None


def _claim_and_run(job: Job, ctx: JobContext, record_failure: Callable[[JobResult], bool], started: float
                   ) -> JobResult | None:  # fmt: skip
    out_dir = ctx.out_dir
    try:
        if job.problem is None and out_dir.finished(job.output, job.overwrite):
            return result_for(job, ctx.rank, "skipped", started)
        failed = failed_before(job, ctx)
        if failed is not None:
            return failed
        claim = out_dir.try_claim(job, ctx.owner)
    except StorageError:
        raise
    except AvatarGenError as err:  # a user's file at OUT.lock, an out-dir that cannot be written
        return result_for(
            job, ctx.rank, "failed", started, error=str(err), exit_code=err.exit_code, worker=WORKER, ran=True
        )
    if claim is None:
        return None
    try:
        if job.problem is None and out_dir.finished(job.output, job.overwrite):  # by another worker in between
            return result_for(job, ctx.rank, "skipped", started)
        failed = failed_before(job, ctx)
        if failed is not None:
            return failed
        out_dir.clear_failure(job.claimed_as)  # a retry
        resume = job.problem is None and out_dir.resumable(job.output)
        result = run_job(job, ctx, claim, resume)
        if result.status == "failed" and (result.exit_code == EXIT_BAD_INPUT or record_failure(result)):
            out_dir.record_failure(job.claimed_as, result.error or "failed", result.exit_code)
        ctx.storage_down_since = None  # the store answered all through the job
        return result
    finally:
        with contextlib.suppress(StorageError):  # the store is down: the claim's lease runs out instead
            claim.release()
