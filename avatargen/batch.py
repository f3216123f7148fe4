"""Bulk rendering: many (image, audio, prompt) jobs from a JSONL or CSV file, by any number of workers sharing one
out-dir, with no coordinator.

A worker is one ``avatargen batch JOBS --out-dir DIR`` process (started by hand, GNU parallel, a Slurm array, a
Kubernetes indexed Job, or as a torchrun rank in ``runtime.batch_mode=spread``). It takes the next job that is neither
finished (``OUT.mp4`` exists), nor locked by a live worker (``OUT.lock``, ``io.output_lock``), nor failed for good
(``OUT.failed.json``), renders it under its lock, and goes on until every job is finished or failed, waiting for the
jobs other workers hold: if one of them dies, its lock frees itself and the job is resumed from its last checkpoint
by whoever claims it next. A job runs once at a time, whatever the number of workers. Each job is one call of
``avatargen.render.render()`` in this process (models are built once and reused while the model config stays the
same, see ``pipeline.build.place_modules``). ``runtime.batch_mode=shard`` under torchrun renders every job with all
ranks, FSDP-sharded, in order. Each worker prints a line per job, then a summary, and writes ``batch_report.json``
(under torchrun rank 0 for all ranks). The state on disk is in ``batch_state``.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import shlex
import socket
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

from avatargen.config.loader import load_config, to_config
from avatargen.config.schema import BatchMode
from avatargen.batch_state import (MANIFEST_NAME, bad_row_claim, failed_record_for, read_failure, record_failure,
                                   write_atomic, write_manifest)
from avatargen.errors import (EXIT_BAD_INPUT, EXIT_FAILURE, EXIT_OK, AvatarGenError, BadInputError, ConfigError,
                              RenderInterrupted, ResumeMismatchError)
from avatargen.io.output_lock import OutputLock, lock_path_for
from avatargen.io.owned_names import foreign_reason, is_avatargen_resume_folder, remove_name
from avatargen.io.resume_store import resume_folder_for
from avatargen.io.targets import refuse_writing_inputs
from avatargen.runtime.distributed import RankFailedError, ensure_process_group, full_world, solo_rank

REPORT_NAME = "batch_report.json"
JOB_KEYS = ("image", "video", "audio", "prompt", "output", "overrides", "person_boxes", "audio_type")


@dataclass
class Job:
    """One row of the jobs file, paths resolved: inputs against the jobs file's folder, output against --out-dir.
    A field the row does not give is None (its job cannot run: ``problem`` says why)."""

    index: int
    image: Path | None  # None: the job dubs ``video`` (or the row gives neither)
    audio: Path | None  # the first speaker's file
    output: Path | None
    prompt: str = ""
    overrides: list[str] = field(default_factory=list)
    video: Path | None = None
    extra_audio: tuple[Path, ...] = ()  # the further speakers' files (``audio`` a list)
    person_boxes: tuple[tuple[float, float, float, float], ...] = ()
    audio_type: str = "para"
    problem: str | None = None  # a row that cannot run (reported as failed, the others still run)
    claim: Path | None = None  # what workers lock and mark failed for it: its output, or a bad row's hidden name
    overwrite: bool = False  # --overwrite: replace a user's file at the output's names (io.owned_names)

    @property
    def claimed_as(self) -> Path:
        return self.claim if self.claim is not None else self.output


@dataclass
class JobResult:
    index: int
    status: str  # ok | skipped (finished before, or by another worker) | failed | running | pending
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
    ran: bool = False  # this worker rendered (or tried) it; else it reports what it found on disk


def _row_to_job(index: int, row: dict[str, Any], base: Path, out_dir: Path, where: str, allow_outside: bool) -> Job:
    """One row as a job; a row that cannot run gets a ``problem`` (its job fails alone, with that reason)."""
    problems: list[str] = []
    unknown = sorted(set(row) - set(JOB_KEYS))
    if unknown:
        problems.append(f"unknown column(s) {', '.join(unknown)}; valid: {', '.join(JOB_KEYS)}")
    fields: dict[str, str] = {}
    missing = []
    audio = _audio_files(row.get("audio"), problems)  # one file, or a list (CSV: ';' between) for two speakers
    row = {**row, "audio": audio[0] if audio else ""}
    for key in ("image", "video", "audio", "output", "prompt", "audio_type"):
        value = row.get(key)
        if value is None or value == "":
            missing += [key] if key in ("audio", "output") else []
            value = ""
        elif not isinstance(value, str):
            problems.append(f"{key} must be a string, not {type(value).__name__} ({json.dumps(value)})")
            value = ""
        fields[key] = value
    if not fields["image"] and not fields["video"]:
        missing.insert(0, "image (or video)")
    if missing:
        problems.insert(0, f"missing {', '.join(missing)} (every job needs image or video, audio and output)")
    boxes = _person_boxes(row.get("person_boxes"), problems)
    overrides = row.get("overrides") or []
    if isinstance(overrides, str):
        try:
            overrides = shlex.split(overrides)  # CSV: one space-separated string
        except ValueError as err:  # an unclosed quote: this row fails, the others run
            problems.append(f"overrides '{overrides}' cannot be split into key=value words ({err}); close the quote")
            overrides = []
    elif not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        problems.append(f"overrides must be a list of key=value strings, not {json.dumps(overrides)}")
        overrides = []
    output = out_dir / fields["output"] if fields["output"] else None
    if output is not None and not allow_outside and not _inside(output, out_dir):
        problems.append(f"output '{fields['output']}' is outside --out-dir '{out_dir}'; give a path inside it, or pass "
                        "--allow-outside-out-dir")  # fmt: skip
    image = base / fields["image"] if fields["image"] else None
    video = base / fields["video"] if fields["video"] else None
    first_audio = base / fields["audio"] if fields["audio"] else None
    job = Job(index, image, first_audio, output, fields["prompt"], list(overrides), video=video,
              extra_audio=tuple(base / a for a in audio[1:]), person_boxes=boxes, audio_type=fields["audio_type"] or "para")  # fmt: skip
    job.problem = f"{where}: {'; '.join(problems)}" if problems else None
    return job


def output_identity(path: Path) -> str:
    """What tells two outputs apart: the absolute path with links and ``..`` resolved (as far as it exists)."""
    return os.path.realpath(path)


def _audio_files(value: Any, problems: list[str]) -> list[str]:
    """A row's ``audio``: one path, a list of paths (JSONL) or paths joined by ';' (CSV)."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(";") if part.strip()]
    if isinstance(value, list) and value and all(isinstance(v, str) and v for v in value):
        return list(value)
    if value not in (None, "", []):
        problems.append(f"audio must be a path or a list of paths (one per speaker), not {json.dumps(value)}")
    return []


def _person_boxes(value: Any, problems: list[str]) -> tuple[tuple[float, float, float, float], ...]:
    """A row's ``person_boxes``: [[x0, y0, x1, y1], ...] (JSONL) or 'x0,y0,x1,y1;...' (CSV)."""
    if value in (None, "", []):
        return ()
    parts = value.split(";") if isinstance(value, str) else value
    try:
        boxes = tuple(tuple(float(v) for v in (part.split(",") if isinstance(part, str) else part)) for part in parts)
        if all(len(box) == 4 for box in boxes):
            return boxes  # type: ignore[return-value]
    except (TypeError, ValueError):
        pass
    problems.append(f"person_boxes must be [[x0, y0, x1, y1], ...] in pixels (CSV: x0,y0,x1,y1;...), not {json.dumps(value)}")
    return ()


def _inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` (links resolved) is ``folder`` or below it."""
    return path.resolve().is_relative_to(folder.resolve())


def outside_out_dir(cfg: Any, out_dir: Path) -> str | None:
    """Why a job's config would write outside ``out_dir`` (an HLS ``output.publish`` target elsewhere), or None."""
    for target in cfg.output.publish:
        if "://" not in str(target) and not _inside(Path(str(target)).expanduser(), out_dir):
            return (f"output.publish target '{target}' is outside --out-dir '{out_dir}'; publish inside it, or pass "
                    "--allow-outside-out-dir")  # fmt: skip
    return None


def read_jobs(jobs_file: Path, out_dir: Path, allow_outside: bool = False) -> list[Job]:
    """Jobs of a ``.jsonl`` (one JSON object a line) or ``.csv`` (header row) file; a malformed row becomes a job that
    fails with a message naming its line, a missing or unreadable file fails the batch (BadInputError). Outputs must
    lie inside ``out_dir`` unless ``allow_outside``."""
    try:
        text = jobs_file.read_text(encoding="utf-8-sig")  # a byte-order mark (spreadsheet exports) is not a column
    except (OSError, UnicodeDecodeError) as err:
        raise BadInputError(f"jobs file '{jobs_file}' could not be read ({err.__class__.__name__}); give a JSONL or CSV file") from None
    base = jobs_file.resolve().parent
    jobs: list[Job] = []
    if jobs_file.suffix.lower() == ".csv":
        for number, row in enumerate(csv.DictReader(text.splitlines()), start=2):
            row = {k.strip(): (v or "").strip() for k, v in row.items() if k is not None and (v or "").strip()}
            jobs.append(_row_to_job(len(jobs), row, base, out_dir, f"{jobs_file.name} line {number}", allow_outside))
    else:
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            where = f"{jobs_file.name} line {number}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                row, problem = {}, f"{where}: not valid JSON ({err.msg})"
            else:
                problem = None if isinstance(row, dict) else f"{where}: each line must be a JSON object"
            job = _row_to_job(len(jobs), row if isinstance(row, dict) else {}, base, out_dir, where, allow_outside)
            job.problem = problem or job.problem
            jobs.append(job)
    seen: dict[str, int] = {}
    for job in jobs:
        if job.problem is not None:
            continue
        same = output_identity(job.output)  # x.mp4, d/../x.mp4 and link/x.mp4 are one file
        if same in seen:
            job.problem = f"output '{job.output}' is also the output of job {seen[same]}; give each job its own output"
        seen.setdefault(same, job.index)
    for job in jobs:
        job.claim = job.output if job.problem is None else bad_row_claim(out_dir, job.index, job.problem)
    return jobs


WORKER = f"{socket.gethostname()}:{os.getpid()}"  # how reports and status name this worker
POLL_S = 1.0  # how often a worker with nothing to claim looks again at the jobs other workers hold


def _text(path: Path | None) -> str:
    return "" if path is None else str(path)


def _result(job: Job, rank: int, status: str, started: float, **extra: Any) -> JobResult:
    audio = ";".join(str(a) for a in (job.audio, *job.extra_audio) if a is not None)
    return JobResult(job.index, status, _text(job.output), _text(job.image or job.video), audio, job.prompt, job.overrides,
                     rank, seconds=round(time.perf_counter() - started, 3), **extra)  # fmt: skip


def run_job(
    job: Job, overrides: list[str], rank: int, solo: bool, warn: Callable[[str], None], confine_to: Path | None = None,
    output_lock: OutputLock | None = None, resume: bool = False, resume_command: str = "",
) -> JobResult:  # fmt: skip
    """Render one job; every failure but a stop request or a broken group is caught and recorded. ``confine_to``:
    the folder every file of the job must be written in (``--out-dir``), None for anywhere. ``output_lock``: the
    job's lock, held by the caller; ``resume`` continues the job's stopped render (or starts over if its inputs or
    config changed since). ``resume_command``: what a stopped job's message says to run (the batch command: a
    worker resumes a stopped job by itself)."""
    from avatargen.render import RenderRequest, render

    started = time.perf_counter()
    if job.problem is not None:
        return _result(job, rank, "failed", started, error=job.problem, exit_code=EXIT_BAD_INPUT, worker=WORKER, ran=True)
    if job.output.is_file():
        return _result(job, rank, "skipped", started)
    try:
        cfg = load_config([*overrides, *job.overrides])
        outside = outside_out_dir(cfg, confine_to) if confine_to is not None else None
        if outside is not None:
            raise BadInputError(outside)
        request = RenderRequest(image=job.image, audio=job.audio, output=job.output, prompt=job.prompt, video=job.video,
                                extra_audio=job.extra_audio, person_boxes=job.person_boxes, audio_type=job.audio_type)  # fmt: skip
        quiet = lambda message: None if message.startswith("note: model.weights=random") else warn(message)  # noqa: E731

        def attempt(resume: bool) -> dict[str, Any]:
            try:
                with solo_rank() if solo else contextlib.nullcontext():
                    return render(request, cfg, warn=quiet, resume=resume, output_lock=output_lock,
                                  resume_command=resume_command, overwrite=job.overwrite)  # fmt: skip
            except ResumeMismatchError:
                return attempt(False)  # the job changed since it was stopped: its old state is of no use

        report = attempt(resume)
    except (RenderInterrupted, RankFailedError, KeyboardInterrupt):
        raise  # the user stopped the batch, or another rank died mid-job: the group cannot go on
    except AvatarGenError as err:
        return _result(job, rank, "failed", started, error=str(err), exit_code=err.exit_code, worker=WORKER, ran=True)
    except Exception as err:  # a bug in one job must not stop the others: record it with its inputs
        return _result(job, rank, "failed", started, error=f"unexpected {err.__class__.__name__}: {err}",
                       exit_code=EXIT_FAILURE, worker=WORKER, ran=True)  # fmt: skip
    return _result(job, rank, "ok", started, frames=report["frames"], worker=WORKER, resumed_from=report["resumed_from"],
                   ran=True)  # fmt: skip


def _claim_and_run(job: Job, overrides: list[str], rank: int, solo: bool, warn: Callable[[str], None],
                   confine_to: Path | None, retry_before: float | None, resume_command: str = "") -> JobResult | None:  # fmt: skip
    """Run ``job`` if it is this worker's to run; its result, or None while another live worker holds it.

    A row that cannot run is claimed like a job (under its hidden name, ``batch_state.bad_row_claim``), so one
    worker reports it and the others find it failed. ``retry_before``: a job failed for good before this time is
    tried again (``--retry-failed``); None: never."""
    started = time.perf_counter()
    finished = lambda: job.problem is None and job.output.is_file()  # noqa: E731
    if finished():
        return run_job(job, overrides, rank, solo, warn, confine_to)  # nothing to claim
    failed = _failed_result(job, rank, retry_before)
    if failed is not None:
        return failed
    claim = job.claimed_as
    try:
        claim.parent.mkdir(parents=True, exist_ok=True)
        if job.overwrite and foreign_reason(lock_path_for(claim), "lock") is not None:
            remove_name(lock_path_for(claim))  # --overwrite: a user's file or a link at OUT.lock (a link as a link)
        lock = OutputLock(claim)
        claimed = lock.try_acquire()
    except BadInputError as err:  # a user's file, folder or link at OUT.lock: this job fails, the others run
        return _result(job, rank, "failed", started, error=str(err), exit_code=EXIT_BAD_INPUT, worker=WORKER, ran=True)
    except OSError as err:
        return _result(job, rank, "failed", started, error=f"cannot write to output folder '{claim.parent}' "
                       f"({err.strerror}); choose a writable --out-dir", exit_code=EXIT_BAD_INPUT, worker=WORKER, ran=True)  # fmt: skip
    if not claimed:
        return None
    try:
        if finished():  # finished by another worker between the look and the claim
            return _result(job, rank, "skipped", started)
        failed = _failed_result(job, rank, retry_before)
        if failed is not None:
            return failed
        failed_record_for(claim).unlink(missing_ok=True)  # a retry
        # stopped or killed mid-job: continue it (a folder at that name that avatargen did not make is the render's to refuse)
        resume = job.problem is None and is_avatargen_resume_folder(resume_folder_for(job.output))
        result = run_job(job, overrides, rank, solo, warn, confine_to, output_lock=lock, resume=resume,
                         resume_command=resume_command)  # fmt: skip
        if result.status == "failed":
            record_failure(claim, result.error or "failed", result.exit_code)
        return result
    finally:
        lock.release()


def _failed_result(job: Job, rank: int, retry_before: float | None) -> JobResult | None:
    """The job's recorded failure as a result, unless there is none or it is to be retried."""
    failure = read_failure(job.claimed_as)
    if failure is None or (retry_before is not None and float(failure.get("time", 0)) < retry_before):
        return None
    return _result(job, rank, "failed", time.perf_counter(), error=str(failure.get("error")),
                   exit_code=int(failure.get("exit_code", EXIT_FAILURE)), worker=f"{failure.get('host')}:{failure.get('pid')}")  # fmt: skip


def work_through(jobs: list[Job], overrides: list[str], rank: int, solo: bool, warn: Callable[[str], None],
                 confine_to: Path | None, retry_failed: bool, resume_command: str = "") -> list[JobResult]:  # fmt: skip
    """This worker's pass over ``jobs``: claim and run each job nobody else holds, then wait for the ones others hold
    (they come back if their worker dies) until every job is finished or failed. Returns a result per job."""
    retry_before = time.time() if retry_failed else None  # failures recorded during this run are not retried again
    results: dict[int, JobResult] = {}
    waiting = list(jobs)
    while waiting:
        held = []
        for job in waiting:
            result = _claim_and_run(job, overrides, rank, solo, warn, confine_to, retry_before, resume_command)
            if result is None:
                held.append(job)
                continue
            results[job.index] = result
            if result.ran:
                _report_progress(job, result, rank, warn)
        waiting = held
        if waiting:
            time.sleep(POLL_S)
    return [results[job.index] for job in jobs]


def _report_progress(job: Job, result: JobResult, rank: int, warn: Callable[[str], None]) -> None:
    who = f"worker {WORKER}" + (f" (rank {rank})" if rank else "")
    if result.status == "failed":
        audio = ";".join(str(a) for a in (job.audio, *job.extra_audio) if a is not None) or None
        named = (("image", job.image), ("video", job.video), ("audio", audio), ("output", job.output))
        given = ", ".join(f"{name} '{path}'" for name, path in named if path is not None)
        warn(f"{who}: job {job.index} failed{f' ({given})' if given else ''}: {result.error}")
        return
    resumed = f", resumed from frame {result.resumed_from}" if result.resumed_from else ""
    warn(f"{who}: job {job.index} ok: '{job.output}', {result.frames} frames in {result.seconds:.1f} s{resumed}")


def _gather(results: list[JobResult], world: Any) -> list[JobResult]:
    """Rank 0 collects every rank's results through torchrun's store (no collective: ranks finish at different times,
    and a rank that dies takes the group down through torchrun)."""
    import torch.distributed as dist

    store = dist.distributed_c10d._get_default_store()
    store.set(f"avatargen/batch/{world.rank}", json.dumps([asdict(r) for r in results]))
    if not world.is_primary:
        return results
    keys = [f"avatargen/batch/{r}" for r in range(world.world_size)]
    store.wait(keys, timedelta(days=7))
    everyone = [JobResult(**item) for key in keys for item in json.loads(store.get(key))]
    by_job: dict[int, JobResult] = {}
    for result in everyone:  # one result per rank for each job: keep the one of the rank that ran it
        if result.index not in by_job or (result.ran and not by_job[result.index].ran):
            by_job[result.index] = result
    return [by_job[index] for index in sorted(by_job)]


def exit_code_of(results: list[JobResult]) -> int:
    """0 when every job succeeded or was already done; 2 if a failure was bad input or config; 1 otherwise."""
    codes = [r.exit_code for r in results if r.status == "failed"]
    if not codes:
        return EXIT_OK
    return EXIT_BAD_INPUT if all(c == EXIT_BAD_INPUT for c in codes) else EXIT_FAILURE


def print_summary(results: list[JobResult], report_path: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"avatargen batch: {len(results)} job(s)")
    for name in ("#", "status", "output", "frames", "seconds", "worker", "error"):
        table.add_column(name, overflow="fold")
    colour = {"ok": "green", "skipped": "cyan", "failed": "red"}
    for r in results:
        worker = (r.worker or "") + (f" (rank {r.rank})" if r.rank else "")
        table.add_row(str(r.index), f"[{colour.get(r.status, 'white')}]{r.status}[/]", r.output,
                      "" if r.frames is None else str(r.frames), f"{r.seconds:.1f}", worker, r.error or "")  # fmt: skip
    console = Console(file=sys.stdout, width=160)
    console.print(table)
    counts = {s: sum(r.status == s for r in results) for s in ("ok", "skipped", "failed")}
    console.print(f"{counts['ok']} ok, {counts['skipped']} skipped, {counts['failed']} failed; report: {report_path}")


def run_batch(
    jobs_file: Path, out_dir: Path, overrides: list[str], warn: Callable[[str], None], allow_outside: bool = False,
    retry_failed: bool = False, resume_command: str = "", overwrite: bool = False,
) -> int:  # fmt: skip
    """Work through the jobs of ``jobs_file`` into ``out_dir`` as one worker among any number; returns the exit code
    (see ``exit_code_of``). Every file a job writes stays inside ``out_dir`` unless ``allow_outside``; jobs failed for
    good are retried only with ``retry_failed``. ``resume_command``: the command that continues a batch stopped
    mid-job (this one: a worker resumes a stopped job from its last checkpoint). ``overwrite``: jobs replace what is at
    their outputs' names even when avatargen did not write it (else such a job fails, exit 2)."""
    config = to_config(load_config(overrides))  # a bad base config fails the whole batch at once (exit 2)
    jobs = read_jobs(jobs_file, out_dir, allow_outside)
    for job in jobs:
        job.overwrite = overwrite
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
    confine = None if allow_outside else out_dir
    refuse_writing_inputs([out_dir / REPORT_NAME, out_dir / MANIFEST_NAME], [jobs_file],
                          fix="give the jobs file another name or place")  # fmt: skip
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        write_manifest(out_dir, [job.claim for job in jobs])  # for `avatargen batch status` (a bad row: its claim)
    except OSError as err:
        raise BadInputError(f"cannot write to --out-dir '{out_dir}' ({err.strerror}); choose a writable folder") from None
    if spread or world.world_size == 1:  # one worker among any number: claims jobs through their locks
        results = work_through(jobs, overrides, world.rank, world.world_size > 1, warn, confine, retry_failed,
                               resume_command)  # fmt: skip
    else:  # shard: every rank renders every job, together, in order
        results = []
        for job in jobs:
            result = run_job(job, overrides, world.rank, solo=False, warn=warn, confine_to=confine,
                             resume_command=resume_command)  # fmt: skip
            if result.status == "failed" and world.is_primary:
                _report_progress(job, result, world.rank, warn)
            results.append(result)
    if world.world_size > 1 and spread:
        results = _gather(results, world)
    if not world.is_primary:
        return EXIT_OK  # rank 0 reports for everybody
    report_path = out_dir / REPORT_NAME
    code = exit_code_of(results)
    report = {"jobs_file": str(jobs_file), "out_dir": str(out_dir), "mode": config.runtime.batch_mode.value,
              "world_size": world.world_size, "worker": WORKER, "exit_code": code,
              "jobs": [asdict(r) for r in results]}  # fmt: skip
    write_atomic(report_path, json.dumps(report, indent=2))
    print_summary(results, report_path)
    return code
