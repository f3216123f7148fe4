"""Bulk rendering: many (image, audio, prompt) jobs from a JSONL or CSV file, resumable, over torchrun's ranks.

Each job is one call of ``avatargen.render.render()`` in this process (models are built once and reused while the
model config stays the same, see ``runtime.sharding.place_modules``). Under torchrun, ``runtime.batch_mode=spread``
gives rank r the jobs r, r+N, ... to render alone; ``shard`` renders every job with all ranks, FSDP-sharded. A job
whose output already exists is skipped (renders only rename ``OUT.partial.mp4`` onto ``OUT.mp4`` on success), so
re-running a half-finished batch resumes it; a failing job is recorded and the others go on. Rank 0 writes
``batch_report.json`` and prints the summary.
"""

from __future__ import annotations

import csv
import json
import shlex
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

from avatargen.config.loader import load_config, to_config
from avatargen.config.schema import BatchMode
from avatargen.errors import EXIT_BAD_INPUT, EXIT_FAILURE, EXIT_OK, AvatarGenError, BadInputError, RenderInterrupted
from avatargen.runtime.distributed import RankFailedError, ensure_process_group, full_world, solo_rank

REPORT_NAME = "batch_report.json"
JOB_KEYS = ("image", "audio", "prompt", "output", "overrides")


@dataclass
class Job:
    """One row of the jobs file, paths resolved: inputs against the jobs file's folder, output against --out-dir."""

    index: int
    image: Path
    audio: Path
    output: Path
    prompt: str = ""
    overrides: list[str] = field(default_factory=list)
    problem: str | None = None  # a row that cannot run (reported as failed, the others still run)


@dataclass
class JobResult:
    index: int
    status: str  # ok | skipped | failed
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


def _row_to_job(index: int, row: dict[str, Any], base: Path, out_dir: Path, where: str, allow_outside: bool) -> Job:
    """One row as a job; a row that cannot run gets a ``problem`` (its job fails alone, with that reason)."""
    problems: list[str] = []
    unknown = sorted(set(row) - set(JOB_KEYS))
    if unknown:
        problems.append(f"unknown column(s) {', '.join(unknown)}; valid: {', '.join(JOB_KEYS)}")
    fields: dict[str, str] = {}
    missing = []
    for key in ("image", "audio", "output", "prompt"):
        value = row.get(key)
        if value is None or value == "":
            missing += [key] if key != "prompt" else []
            value = ""
        elif not isinstance(value, str):
            problems.append(f"{key} must be a string, not {type(value).__name__} ({json.dumps(value)})")
            value = ""
        fields[key] = value
    if missing:
        problems.insert(0, f"missing {', '.join(missing)} (every job needs image, audio and output)")
    overrides = row.get("overrides") or []
    if isinstance(overrides, str):
        overrides = shlex.split(overrides)  # CSV: one space-separated string
    elif not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        problems.append(f"overrides must be a list of key=value strings, not {json.dumps(overrides)}")
        overrides = []
    output = out_dir / fields["output"]
    if fields["output"] and not allow_outside and not _inside(output, out_dir):
        problems.append(f"output '{fields['output']}' is outside --out-dir '{out_dir}'; give a path inside it, or pass "
                        "--allow-outside-out-dir")  # fmt: skip
    job = Job(index, base / fields["image"], base / fields["audio"], output, fields["prompt"], list(overrides))
    job.problem = f"{where}: {'; '.join(problems)}" if problems else None
    return job


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
        text = jobs_file.read_text()
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
    seen: dict[Path, int] = {}
    for job in jobs:
        if job.problem is None and job.output in seen:
            job.problem = f"output '{job.output}' is also the output of job {seen[job.output]}; give each job its own output"
        seen.setdefault(job.output, job.index)
    return jobs


def _result(job: Job, rank: int, status: str, started: float, **extra: Any) -> JobResult:
    return JobResult(job.index, status, str(job.output), str(job.image), str(job.audio), job.prompt, job.overrides, rank,
                     seconds=round(time.perf_counter() - started, 3), **extra)  # fmt: skip


def run_job(
    job: Job, overrides: list[str], rank: int, solo: bool, warn: Callable[[str], None], confine_to: Path | None = None
) -> JobResult:
    """Render one job; every failure but a stop request or a broken group is caught and recorded. ``confine_to``:
    the folder every file of the job must be written in (``--out-dir``), None for anywhere."""
    from avatargen.render import RenderRequest, render

    started = time.perf_counter()
    if job.problem is not None:
        return _result(job, rank, "failed", started, error=job.problem, exit_code=EXIT_BAD_INPUT)
    if job.output.is_file():
        return _result(job, rank, "skipped", started)
    try:
        cfg = load_config([*overrides, *job.overrides])
        outside = outside_out_dir(cfg, confine_to) if confine_to is not None else None
        if outside is not None:
            raise BadInputError(outside)
        request = RenderRequest(image=job.image, audio=job.audio, output=job.output, prompt=job.prompt)
        quiet = lambda message: None if message.startswith("note: model.weights=random") else warn(message)  # noqa: E731
        if solo:
            with solo_rank():
                report = render(request, cfg, warn=quiet)
        else:
            report = render(request, cfg, warn=quiet)
    except (RenderInterrupted, RankFailedError, KeyboardInterrupt):
        raise  # the user stopped the batch, or another rank died mid-job: the group cannot go on
    except AvatarGenError as err:
        return _result(job, rank, "failed", started, error=str(err), exit_code=err.exit_code)
    except Exception as err:  # a bug in one job must not stop the others: record it with its inputs
        return _result(job, rank, "failed", started, error=f"unexpected {err.__class__.__name__}: {err}", exit_code=EXIT_FAILURE)
    return _result(job, rank, "ok", started, frames=report["frames"])


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
    merged = [JobResult(**item) for key in keys for item in json.loads(store.get(key))]
    return sorted(merged, key=lambda r: r.index)


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
    for name in ("#", "status", "output", "frames", "seconds", "rank", "error"):
        table.add_column(name, overflow="fold")
    colour = {"ok": "green", "skipped": "cyan", "failed": "red"}
    for r in results:
        table.add_row(str(r.index), f"[{colour[r.status]}]{r.status}[/]", r.output, "" if r.frames is None else str(r.frames),
                      f"{r.seconds:.1f}", str(r.rank), r.error or "")  # fmt: skip
    console = Console(file=sys.stdout, width=160)
    console.print(table)
    counts = {s: sum(r.status == s for r in results) for s in ("ok", "skipped", "failed")}
    console.print(f"{counts['ok']} ok, {counts['skipped']} skipped, {counts['failed']} failed; report: {report_path}")


def run_batch(
    jobs_file: Path, out_dir: Path, overrides: list[str], warn: Callable[[str], None], allow_outside: bool = False
) -> int:
    """Run every job of ``jobs_file`` into ``out_dir``; returns the exit code (see ``exit_code_of``). Every file a job
    writes stays inside ``out_dir`` unless ``allow_outside``."""
    config = to_config(load_config(overrides))  # a bad base config fails the whole batch at once (exit 2)
    jobs = read_jobs(jobs_file, out_dir, allow_outside)
    world = full_world()
    spread = config.runtime.batch_mode == BatchMode.spread
    if world.world_size > 1:
        from avatargen.pipeline.build import resolve_device
        from avatargen.runtime.numa import pin_rank

        device = resolve_device(config)
        ensure_process_group(device, config.runtime.dist_timeout_s)
        if spread and config.runtime.numa:
            pin_rank(world, device)  # shard mode pins in start_parallel
    mine = jobs[world.rank :: world.world_size] if spread else jobs
    results = []
    for job in mine:
        result = run_job(job, overrides, world.rank, solo=spread and world.world_size > 1, warn=warn,
                         confine_to=None if allow_outside else out_dir)  # fmt: skip
        if result.status == "failed" and (world.is_primary or spread):
            warn(f"job {job.index} failed on rank {world.rank} (image '{job.image}', audio '{job.audio}', "
                 f"output '{job.output}'): {result.error}")  # fmt: skip
        results.append(result)
    if world.world_size > 1 and spread:
        results = _gather(results, world)
    if not world.is_primary:
        return EXIT_OK  # rank 0 reports for everybody
    out_dir.mkdir(parents=True, exist_ok=True)
    report_path = out_dir / REPORT_NAME
    code = exit_code_of(results)
    report = {"jobs_file": str(jobs_file), "out_dir": str(out_dir), "mode": config.runtime.batch_mode.value,
              "world_size": world.world_size, "exit_code": code, "jobs": [asdict(r) for r in results]}  # fmt: skip
    tmp = report_path.with_name(f".{REPORT_NAME}.tmp")
    tmp.write_text(json.dumps(report, indent=2))
    tmp.replace(report_path)
    print_summary(results, report_path)
    return code
