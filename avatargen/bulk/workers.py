"""The file-lock workers of ``avatargen batch JOBS --out-dir DIR``: one worker among any number, no coordinator.

A worker is one ``avatargen batch`` process (started by hand, GNU parallel, a Slurm array, a Kubernetes indexed Job,
or as a torchrun rank in ``runtime.batch_mode=spread``). It streams the jobs file, claims each job nobody else holds
(``bulk.runner``; claims are lock files on a shared file system, or conditional writes in a bucket), renders it, and
waits for the jobs others hold until every job is finished or failed: if such a worker dies, its claim frees itself
and the job is resumed from its last checkpoint by whoever claims it next. ``runtime.batch_mode=shard`` under
torchrun renders every job with all ranks, FSDP-sharded, in order. Each worker prints a line per job, then a
summary, and writes ``batch_report.json`` (under torchrun rank 0, for all ranks).
"""

from __future__ import annotations

import json
import signal
import time
from dataclasses import asdict
from datetime import timedelta
from typing import Any, Callable, Iterable

from avatargen.bulk.batch_files import batch_jobs, manifest_chunks, open_out_dir, prepare_out_dir, write_report
from avatargen.bulk.jobs import Job
from avatargen.bulk.locations import Where
from avatargen.bulk.remote_render import default_owner
from avatargen.bulk.results import JobResult, ResultLog, progress_line
from avatargen.bulk.runner import WORKER, JobContext, claim_and_run, run_job
from avatargen.bulk.status import MANIFEST_NAME
from avatargen.config.schema import BatchMode, Config
from avatargen.errors import EXIT_OK, ConfigError, RenderInterrupted
from avatargen.interrupts import Interrupted, exit_code_of
from avatargen.runtime.distributed import ensure_process_group, full_world

POLL_S = 1.0  # how often a worker with nothing to claim looks again at the jobs other workers hold


class WorkerStopped(RenderInterrupted):
    """A worker stopped by a signal mid-batch; ``log``: the results of the jobs it ran before."""

    def __init__(self, message: str, exit_code: int, log: ResultLog):
        super().__init__(message, exit_code)
        self.log = log


def work_through(jobs: Iterable[Job], ctx: JobContext) -> ResultLog:
    """This worker's pass over ``jobs``: claim and run each job nobody else holds, then wait for the ones others hold
    (they come back if their worker dies) until every job is finished or failed. A signal ends it with
    ``WorkerStopped`` (the job it was rendering keeps its resume state)."""
    log = ResultLog()
    try:
        return _work_through(jobs, ctx, log)
    except (RenderInterrupted, Interrupted) as stopped:  # in a job's render, or between jobs
        code = exit_code_of(stopped.signum) if isinstance(stopped, Interrupted) else stopped.exit_code
        name = signal.Signals(code - 128).name if code > 128 else "a signal"
        said = f"batch worker stopped by {name} after {log.counts['ok']} job(s) of its own"
        if isinstance(stopped, RenderInterrupted):  # mid-job: what the job kept, as the render says it
            said += f"; the job it was rendering: {stopped}"
        if "resume with: " not in said:
            said += f"; continue with: {ctx.resume_command}"
        raise WorkerStopped(said, code, log) from None


def _work_through(jobs: Iterable[Job], ctx: JobContext, log: ResultLog) -> ResultLog:
    held: list[Job] = []

    def take(job: Job) -> bool:
        result = claim_and_run(job, ctx)
        if result is None:
            return False
        log.add(result)
        if result.ran:
            ctx.warn(progress_line(job, result, f"worker {WORKER}" + (f" (rank {ctx.rank})" if ctx.rank else "")))
        return True

    for job in jobs:
        if not take(job):
            held.append(job)
    while held:
        time.sleep(POLL_S)
        held = [job for job in held if not take(job)]
    return log


def _gather(log: ResultLog, world: Any) -> ResultLog:
    """Rank 0 collects every rank's results through torchrun's store (no collective: ranks finish at different times,
    and a rank that dies takes the group down through torchrun)."""
    import torch.distributed as dist

    store = dist.distributed_c10d._get_default_store()
    store.set(f"avatargen/batch/{world.rank}", json.dumps([asdict(r) for r in log]))
    if not world.is_primary:
        return log
    keys = [f"avatargen/batch/{r}" for r in range(world.world_size)]
    store.wait(keys, timedelta(days=7))
    everyone = [JobResult(**item) for key in keys for item in json.loads(store.get(key))]
    by_job: dict[int, JobResult] = {}
    for result in everyone:  # one result per rank for each job: keep the one of the rank that ran it
        if result.index not in by_job or (result.ran and not by_job[result.index].ran):
            by_job[result.index] = result
    merged = ResultLog()
    for index in sorted(by_job):
        merged.add(by_job[index])
    return merged


def run_workers(jobs_file: Where, out_dir: Where, overrides: list[str], config: Config, warn: Callable[[str], None],
                allow_outside: bool, retry_failed: bool, resume_command: str, overwrite: bool) -> int:  # fmt: skip
    """This process as one worker of the batch (every rank of torchrun as one, in spread mode; all ranks on each job,
    in shard mode); the batch's exit code (see ``bulk.batch.run_batch``)."""
    world = full_world()
    spread = config.runtime.batch_mode == BatchMode.spread
    stages = config.runtime.pipeline_parallel
    if spread and world.world_size > 1 and stages not in (1, "auto"):
        raise ConfigError(f"runtime.pipeline_parallel={stages} with runtime.batch_mode=spread: each rank renders jobs of "
                          f"its own; set runtime.batch_mode=shard to give every job the {world.world_size} ranks as "
                          "pipeline stages")  # fmt: skip
    if world.world_size > 1:
        from avatargen.pipeline.build import resolve_device
        from avatargen.runtime.numa import pin_rank

        device = resolve_device(config)
        ensure_process_group(device, config.runtime.dist_timeout_s)
        if spread and config.runtime.numa:
            pin_rank(world, device)  # shard mode pins in start_parallel
    outputs = open_out_dir(out_dir, config)
    jobs = lambda: batch_jobs(jobs_file, out_dir, config, allow_outside, overwrite)  # noqa: E731
    prepare_out_dir(outputs, jobs_file, overwrite)
    outputs.write_side(MANIFEST_NAME, manifest_chunks(jobs()))  # for `avatargen batch status` (a bad row: its claim)
    ctx = JobContext(overrides, outputs, default_owner(), warn, rank=world.rank, solo=world.world_size > 1,
                     confine=None if allow_outside else out_dir, retry_before=time.time() if retry_failed else None,
                     resume_command=resume_command)  # fmt: skip
    header = {"jobs_file": str(jobs_file), "out_dir": str(out_dir), "engine": "workers",
              "mode": config.runtime.batch_mode.value, "world_size": world.world_size, "worker": WORKER}
    if spread or world.world_size == 1:  # one worker among any number: claims jobs as it goes
        try:
            log = work_through(jobs(), ctx)
        except WorkerStopped as stopped:
            if world.world_size == 1:  # what it did is reported as a finished worker's is
                write_report(outputs, stopped.log, header, stopped.exit_code)
            raise
    else:  # shard: every rank renders every job, together, in order
        ctx.solo = False
        log = ResultLog()
        for job in jobs():
            result = run_job(job, ctx)
            if result.status == "failed" and world.is_primary:
                warn(progress_line(job, result, f"worker {WORKER}"))
            log.add(result)
    if world.world_size > 1 and spread:
        log = _gather(log, world)
    if not world.is_primary:
        return EXIT_OK  # rank 0 reports for everybody
    return write_report(outputs, log, header)
