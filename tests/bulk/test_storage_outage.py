"""Object storage that stops answering under a job: nothing is recorded for the job, which is given back and taken
again when the store answers; a worker gives up only after ``storage_outage_s`` of outage (exit 1)."""

from __future__ import annotations

import socket

import pytest

from avatargen.bulk.batch_files import open_out_dir
from avatargen.bulk.jobs import read_jobs
from avatargen.bulk.locations import where
from avatargen.bulk.runner import JobContext, claim_and_run
from avatargen.bulk.s3 import StorageError
from avatargen.config.loader import load_config, to_config


def _closed_port() -> int:
    with socket.socket() as probe:  # bound then closed: nothing listens there
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow  # ~30 s: boto's own retries against a closed port, twice
def test_a_job_under_a_store_that_does_not_answer_is_given_back_not_failed_for_good(tmp_path, monkeypatch):
    # the worker recorded it as failed for good (OUT.failed.json: skipped by every worker) or, when that write failed
    # too, ended with exit 1 and no report: a 30-s outage stopped every file-lock worker at once
    pytest.importorskip("boto3")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "me")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    config = to_config(load_config([f"storage.endpoint_url=http://127.0.0.1:{_closed_port()}", "storage.region=x"]))
    jobs_file = tmp_path / "jobs.jsonl"
    jobs_file.write_text('{"image": "a.png", "audio": "a.wav", "output": "a.mp4"}\n')
    out_dir = where("s3://bucket/out")
    job = read_jobs(jobs_file, out_dir)[0]
    said: list[str] = []
    ctx = JobContext([], open_out_dir(out_dir, config), "me", said.append, storage_outage_s=3600.0)
    assert claim_and_run(job, ctx) is None and ctx.storage_down_since is not None  # given back: tried again later
    assert len(said) == 1 and said[0].startswith("warning: ") and "tried again when the store answers" in said[0]
    ctx.storage_outage_s = 0.0
    with pytest.raises(StorageError):  # past the outage the worker may wait: it ends (exit 1)
        claim_and_run(job, ctx)
