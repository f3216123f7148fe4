"""``avatargen batch``'s front door: the config, then the engine that runs the jobs (docs/batch.md).

``batch.engine=workers`` (the default): this process is one worker among any number (``bulk.workers``);
``batch.engine=ray`` (``--ray``): this process drives worker actors on a Ray cluster (``bulk.ray_driver``). Both run
each job through ``bulk.runner``, so the out-dir, the report and ``avatargen batch status`` are the same.
"""

from __future__ import annotations

from typing import Callable

from avatargen.bulk.batch_files import object_lines
from avatargen.bulk.jobs import check_jobs_file
from avatargen.bulk.locations import Where
from avatargen.config.loader import load_config, to_config
from avatargen.config.schema import BatchEngine


def run_batch(
    jobs_file: Where, out_dir: Where, overrides: list[str], warn: Callable[[str], None], allow_outside: bool = False,
    retry_failed: bool = False, resume_command: str = "", overwrite: bool = False,
) -> int:  # fmt: skip
    """Run the jobs of ``jobs_file`` into ``out_dir`` (each a folder or an ``ObjectUrl``); returns the exit code: 0
    when every job is finished, 2 when every failure was bad input or config, 1 otherwise. Every file a job writes
    stays inside ``out_dir`` unless ``allow_outside``; jobs failed for good are retried only with ``retry_failed``.
    ``resume_command``: the command that continues a batch stopped mid-job (this one). ``overwrite``: jobs replace
    what is at their outputs' names even when avatargen did not write it (else such a job fails, exit 2)."""
    config = to_config(load_config(overrides))  # a bad base config fails the whole batch at once (exit 2)
    # A wrong path or a file of no job is said now, not after the engine's imports (torch: ~2 s); in a bucket too.
    check_jobs_file(jobs_file, object_lines(config))
    if config.batch.engine == BatchEngine.ray:
        from avatargen.bulk.ray_driver import run_on_ray as engine
    else:
        from avatargen.bulk.workers import run_workers as engine
    return engine(jobs_file, out_dir, overrides, config, warn, allow_outside, retry_failed, resume_command, overwrite)
