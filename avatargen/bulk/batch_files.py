"""What every engine of a batch shares: the out-dir opened (a folder or a bucket prefix), the jobs file streamed,
and the batch's side files there: ``batch_jobs.json`` (every job's output, for ``avatargen batch status``) and
``batch_report.json`` (every job's result)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from avatargen.bulk.bucket_dir import BucketOutDir
from avatargen.bulk.jobs import Job, iter_jobs
from avatargen.bulk.local_dir import LocalOutDir
from avatargen.bulk.locations import ObjectUrl, Where, identity
from avatargen.bulk.outdir import OutDir
from avatargen.bulk.results import REPORT_NAME, ResultLog, print_summary
from avatargen.bulk.status import MADE_BY, MANIFEST_NAME
from avatargen.config.schema import Config
from avatargen.errors import BadInputError
from avatargen.io.targets import refuse_writing_inputs


def open_out_dir(out_dir: Where, config: Config) -> OutDir:
    """The out-dir a batch shares: a bucket prefix, or a folder."""
    if isinstance(out_dir, ObjectUrl):
        from avatargen.bulk.s3 import store_for

        return BucketOutDir(store_for(config.storage), out_dir, config.storage.lease_s)
    return LocalOutDir(out_dir)


def object_lines(config: Config) -> Callable[[ObjectUrl], Iterable[bytes]]:
    """Streams an object's lines (a jobs file in a bucket)."""

    def lines(url: ObjectUrl) -> Iterable[bytes]:
        from avatargen.bulk.s3 import store_for

        store = store_for(config.storage)
        store.check_bucket(url)
        return store.lines(url, "jobs file")

    return lines


def manifest_chunks(jobs: Iterable[Job]) -> Iterator[bytes]:
    """``batch_jobs.json``: every job's output (a bad row: its claim), for ``avatargen batch status``; streamed."""
    yield b'{"made_by": "' + MADE_BY.encode() + b'", "outputs": ['
    seen_any = False
    for job in jobs:
        yield (b",\n" if seen_any else b"\n") + json.dumps(identity(job.claimed_as)).encode("utf-8", "surrogateescape")
        seen_any = True
    yield b"\n]}\n"


def batch_jobs(jobs_file: Where, out_dir: Where, config: Config, allow_outside: bool, overwrite: bool) -> Iterator[Job]:
    """The jobs of ``jobs_file``, streamed (a file or an object), each told whether it may replace a user's files."""
    for job in iter_jobs(jobs_file, out_dir, allow_outside, object_lines(config)):
        job.overwrite = overwrite
        yield job


def prepare_out_dir(outputs: OutDir, jobs_file: Where, overwrite: bool) -> None:
    """Refuse a jobs file at a side file's name, and a user's file there (unless ``overwrite``)."""
    if isinstance(outputs.root, Path) and isinstance(jobs_file, Path):
        refuse_writing_inputs([outputs.root / REPORT_NAME, outputs.root / MANIFEST_NAME], [jobs_file],
                              fix="give the jobs file another name or place")  # fmt: skip
    elif str(jobs_file) in (str(outputs.root / REPORT_NAME), str(outputs.root / MANIFEST_NAME)):
        raise BadInputError(
            f"jobs file '{jobs_file}' is where the batch writes its report; give the jobs file another name or place"
        )
    outputs.prepare([REPORT_NAME, MANIFEST_NAME], overwrite)


def write_report(outputs: OutDir, log: ResultLog, header: dict[str, Any], stopped: int | None = None) -> int:
    """``batch_report.json`` and the summary table; the batch's exit code (``stopped``: a stopped batch's, 130 or
    143, in the report too)."""
    code = log.exit_code() if stopped is None else stopped
    outputs.write_side(REPORT_NAME, log.report_chunks({"made_by": MADE_BY, **header, "exit_code": code}))
    print_summary(log, str(outputs.root / REPORT_NAME))
    return code
