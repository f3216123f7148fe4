"""Inputs, outputs and claims in S3-compatible storage, against a real SeaweedFS on loopback."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from avatargen.bulk.bucket_dir import BucketClaim
from avatargen.bulk.locations import ObjectUrl
from tests.bulk.conftest import BULK, bucket_resume_point, store_of, upload_jobs
from tests.conftest import kill_tree, run_cli
from tests.ffmpeg_probe import decode_frames, probe

pytestmark = pytest.mark.xdist_group("bulk")


def _reference(folder: Path, audio: str, name: str) -> np.ndarray:
    """The frames ``avatargen render`` gives for the face and ``audio`` of ``folder`` (this process, BULK config)."""
    from avatargen.config.loader import load_config
    from avatargen.render import RenderRequest, render

    output = folder / "reference" / name
    render(
        RenderRequest(image=folder / "face.png", audio=folder / audio, output=output),
        load_config(BULK),
        warn=lambda m: None,
    )
    return decode_frames(output)


def _objects(s3_server, bucket: str, prefix: str = "") -> dict[str, int]:
    answer = s3_server.client().list_objects_v2(Bucket=bucket, Prefix=prefix)
    return {item["Key"]: item["Size"] for item in answer.get("Contents", [])}


def _download(s3_server, bucket: str, key: str, path: Path) -> Path:
    s3_server.client().download_file(bucket, key, str(path))
    return path


def test_a_claim_in_a_bucket_has_one_holder_until_released_stale_or_taken_back_by_its_owner(s3_server, bucket):
    store = store_of(s3_server)
    target = ObjectUrl(bucket, "out/x.mp4")
    first = BucketClaim(store, target, "run-a", lease_s=2.0)
    assert first.try_acquire()
    assert not BucketClaim(store, target, "run-b", lease_s=2.0).try_acquire()  # held, renewed every 0.5 s
    time.sleep(2.5)
    assert not BucketClaim(store, target, "run-b", lease_s=2.0).try_acquire()  # still renewed: never stale
    again = BucketClaim(store, target, "run-a", lease_s=2.0)  # its own run takes it back (its worker was lost)
    assert again.try_acquire()
    deadline = time.monotonic() + 5
    while not first.lost and time.monotonic() < deadline:  # the old holder finds out at its next renewal
        time.sleep(0.1)
    assert first.lost and not first.verify()
    first.release()  # the lost holder deletes nothing
    assert not BucketClaim(store, target, "run-c", lease_s=2.0).try_acquire()
    again.release()
    third = BucketClaim(store, target, "run-c", lease_s=2.0)
    assert third.try_acquire()
    third._stop.set()  # its holder stops renewing (a dead worker on another host)
    third._thread.join()
    time.sleep(3.5)  # older than the lease on the store's clock
    assert BucketClaim(store, target, "run-d", lease_s=2.0).try_acquire()


def test_a_render_from_and_to_a_bucket_is_bit_equal_and_a_sigkill_resumes_on_another_scratch(
    s3_server, bucket, s3_env, tmp_path
):
    upload_jobs(s3_server, bucket, tmp_path, [14.0])
    args = [
        "-i",
        f"s3://{bucket}/in/face.png",
        "-a",
        f"s3://{bucket}/in/a0.wav",
        "-o",
        f"s3://{bucket}/r/v.mp4",
        "-q",
        *BULK,
    ]
    first = subprocess.Popen([sys.executable, "-m", "avatargen", "render", *args, f"storage.scratch_dir={tmp_path / 'node1'}"],
                             env=s3_env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    deadline = time.monotonic() + 120
    while "r/v.resume/state-62.safetensors" not in _objects(s3_server, bucket, "r/v.resume/"):  # its 2nd checkpoint
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.05)
    while (bucket_resume_point(s3_server, f"s3://{bucket}/r/v.mp4", tmp_path / "probe") or 0) < 62:  # its video follows (REFRESH_S)
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.2)
    kill_tree(first.pid)  # the machine goes, and its scratch folder with it
    first.communicate()
    assert "r/v.mp4" not in _objects(s3_server, bucket)
    kept = bucket_resume_point(s3_server, f"s3://{bucket}/r/v.mp4", tmp_path / "probe")  # what the bucket holds once the node is gone
    assert kept is not None and kept >= 62, kept
    second = run_cli("render", *args, "--resume", "--json", f"storage.scratch_dir={tmp_path / 'node2'}", env=s3_env)
    assert second.returncode == 0, second.stderr
    report = json.loads(second.stdout)
    assert report["output"] == f"s3://{bucket}/r/v.mp4" and report["resumed_from"] == kept, report  # the bucket's
    assert set(_objects(s3_server, bucket, "r/")) == {"r/v.mp4", "r/v.yaml"}  # no claim, no resume state left
    video = _download(s3_server, bucket, "r/v.mp4", tmp_path / "v.mp4")
    assert np.array_equal(decode_frames(video), _reference(tmp_path, "a0.wav", "v.mp4"))  # as if never stopped
    assert not list((tmp_path / "node2").rglob("*.mp4"))  # its scratch folder went with the render


def test_a_resume_read_while_the_first_worker_still_copies_leaves_out_the_checkpoint_it_deleted(
    s3_server, bucket, tmp_path
):
    """A worker taken for lost may still be rendering its job and copying its resume state to the bucket, deleting a
    checkpoint once a newer one is up. The worker that resumes the job lists the copy, then downloads it: a checkpoint
    gone in between is left out (the resume continues from the one still there), not an error telling the user to
    upload a file avatargen made."""
    from avatargen.bulk.mirror import INDEX, ResumeMirror

    client, folder = s3_server.client(), "out/v.resume"
    checkpoints = [{"file": f"state-{frames}.safetensors", "frames": frames} for frames in (30, 62)]
    client.put_object(Bucket=bucket, Key=f"{folder}/{INDEX}", Body=json.dumps({"checkpoints": checkpoints}).encode())
    for checkpoint in checkpoints:
        client.put_object(Bucket=bucket, Key=f"{folder}/{checkpoint['file']}", Body=b"state")

    store = store_of(s3_server)
    listed = store.list

    def list_then_the_first_worker_moves_on(where):
        yield from list(listed(where))
        client.delete_object(Bucket=bucket, Key=f"{folder}/state-30.safetensors")

    store.list = list_then_the_first_worker_moves_on
    mirror = ResumeMirror(store, ObjectUrl.parse(f"s3://{bucket}/out/v.mp4"), tmp_path / "v.mp4")
    assert mirror.restore()
    restored = json.loads((mirror.local / INDEX).read_text())
    assert [c["frames"] for c in restored["checkpoints"]] == [62]
    assert (mirror.local / "state-62.safetensors").read_bytes() == b"state"
    assert not (mirror.local / "state-30.safetensors").exists()


def test_wrong_credentials_are_one_line_and_exit_2_before_any_render(s3_server, bucket, s3_env, tmp_path):
    upload_jobs(s3_server, bucket, tmp_path, [0.4])
    env = {**s3_env, "AWS_SECRET_ACCESS_KEY": "not-the-secret"}
    for command in (["batch", f"s3://{bucket}/in/jobs.jsonl", "--out-dir", f"s3://{bucket}/out"],
                    ["batch", f"s3://{bucket}/in/jobs.jsonl", "--out-dir", f"s3://{bucket}/out", "--ray"],  # before Ray starts
                    ["render", "-i", f"s3://{bucket}/in/face.png", "-a", f"s3://{bucket}/in/a0.wav", "-o", f"s3://{bucket}/out/x.mp4"]):  # fmt: skip
        result = run_cli(*command, *BULK, env=env)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1, result.stderr
        assert "refused the S3 credentials" in lines[0] and "AWS_SECRET_ACCESS_KEY" in lines[0], lines
    assert set(_objects(s3_server, bucket)) == {f"in/{n}" for n in ("face.png", "a0.wav", "jobs.jsonl")}


def test_a_batch_in_a_bucket_fails_a_missing_input_alone_naming_its_url_and_never_shows_a_partial_mp4(
    s3_server, bucket, s3_env, tmp_path
):
    upload_jobs(s3_server, bucket, tmp_path, [2.0, 0.4, 0.4], missing={1}, bad_rows=1)
    seen: dict[int, set[int]] = {}  # size of every v0.mp4 a reader of the bucket found, while the batch ran
    client, done = s3_server.client(), threading.Event()

    def poll() -> None:
        while not done.is_set():
            for item in client.list_objects_v2(Bucket=bucket, Prefix="out/v0").get("Contents", []):
                if item["Key"] == "out/v0.mp4":
                    body = client.get_object(Bucket=bucket, Key="out/v0.mp4")["Body"].read()
                    seen.setdefault(len(body), set()).add(probe_bytes(body, tmp_path))
            time.sleep(0.02)

    reader = threading.Thread(target=poll)
    reader.start()
    try:
        result = run_cli("batch", f"s3://{bucket}/in/jobs.jsonl", "--out-dir", f"s3://{bucket}/out", *BULK, env=s3_env)
    finally:
        done.set()
        reader.join()
    assert result.returncode == 2, result.stderr  # every failure is bad input
    report = json.loads(client.get_object(Bucket=bucket, Key="out/batch_report.json")["Body"].read())
    assert [j["status"] for j in report["jobs"]] == ["ok", "failed", "ok", "failed"]
    assert f"'s3://{bucket}/in/a1.wav' does not exist in the bucket" in report["jobs"][1]["error"]
    assert report["jobs"][1]["exit_code"] == 2 and "missing audio" in report["jobs"][3]["error"]
    final = client.head_object(Bucket=bucket, Key="out/v0.mp4")["ContentLength"]
    assert seen and set(seen) == {final} and seen[final] == {50}, seen  # whole every time it was there
    status = run_cli("batch", "status", f"s3://{bucket}/out", "--json", env=s3_env)
    summary = json.loads(status.stdout)
    assert (summary["done"], summary["failed"], summary["running"], summary["pending"]) == (2, 2, 0, 0), status.stderr
    again = run_cli("batch", f"s3://{bucket}/in/jobs.jsonl", "--out-dir", f"s3://{bucket}/out", *BULK, env=s3_env)
    report = json.loads(client.get_object(Bucket=bucket, Key="out/batch_report.json")["Body"].read())
    assert again.returncode == 2 and [j["status"] for j in report["jobs"]] == ["skipped", "failed", "skipped", "failed"]
    assert not any(j["ran"] for j in report["jobs"])  # failures recorded in the bucket are not tried again


def test_a_users_object_at_a_jobs_output_fails_that_job_until_overwrite_renders_over_it(s3_server, bucket, s3_env,
                                                                                         tmp_path):  # fmt: skip
    upload_jobs(s3_server, bucket, tmp_path, [0.4])
    client = s3_server.client()
    client.put_object(Bucket=bucket, Key="out/v0.mp4", Body=b"my precious video")  # no made-with metadata
    batch = ("batch", f"s3://{bucket}/in/jobs.jsonl", "--out-dir", f"s3://{bucket}/out", *BULK)
    refused = run_cli(*batch, env=s3_env)
    report = json.loads(client.get_object(Bucket=bucket, Key="out/batch_report.json")["Body"].read())
    assert refused.returncode == 2 and report["jobs"][0]["status"] == "failed", refused.stderr
    assert f"'s3://{bucket}/out/v0.mp4' is an object avatargen did not write" in report["jobs"][0]["error"]
    assert client.get_object(Bucket=bucket, Key="out/v0.mp4")["Body"].read() == b"my precious video"
    assert run_cli(*batch, "--overwrite", env=s3_env).returncode == 0  # its failure retried: --overwrite is its fix
    assert client.head_object(Bucket=bucket, Key="out/v0.mp4")["Metadata"].get("made-with") == "avatargen"


@pytest.mark.parametrize("key, body", [("in/jobs.jsonl", b""), ("in/jobs.csv", b"image,audio,output\n")])
def test_a_jobs_file_in_a_bucket_with_no_job_is_refused_as_a_local_one(s3_server, bucket, s3_env, key, body):
    s3_server.client().put_object(Bucket=bucket, Key=key, Body=body)
    for engine in ([], ["--ray"]):  # before Ray starts
        result = run_cli("batch", f"s3://{bucket}/{key}", "--out-dir", f"s3://{bucket}/out", *engine, *BULK, env=s3_env)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1, result.stderr
        assert lines[0].startswith(f"error: jobs file 's3://{bucket}/{key}' holds no jobs (empty, or "), lines
    assert set(_objects(s3_server, bucket)) == {key}  # nothing written under out/


def test_status_of_a_prefix_holding_nothing_says_so_as_for_a_missing_folder(s3_server, bucket, s3_env):
    result = run_cli("batch", "status", f"s3://{bucket}/nothing-here", env=s3_env)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        f"error: out-dir 's3://{bucket}/nothing-here' does not exist (no object under it); give the --out-dir of a "
        "batch"], result.stderr  # fmt: skip


def probe_bytes(data: bytes, folder: Path) -> int:
    """Frames of the MP4 ``data`` (0 where it does not decode)."""
    path = folder / f"seen-{time.monotonic_ns()}.mp4"
    path.write_bytes(data)
    try:
        return probe(path)["frames"]
    except Exception:  # noqa: BLE001 - a truncated file: counted as such
        return 0
    finally:
        path.unlink()
