"""``avatargen batch --ray`` on a real multi-node Ray cluster (one machine, raylets on 127.0.0.1), with the jobs, the
inputs and the outputs in a real S3 store (SeaweedFS)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from tests.bulk.conftest import BULK, bucket_resume_point, upload_jobs
from tests.bulk.servers import RayCluster, parent_pid
from tests.conftest import REPO, kill_tree, run_cli
from tests.ffmpeg_probe import decode_frames

pytestmark = pytest.mark.xdist_group("bulk")


def _driver(cluster: RayCluster, bucket: str, env: dict[str, str], *extra: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "avatargen", "batch", f"s3://{bucket}/in/jobs.jsonl", "--out-dir", f"s3://{bucket}/out",
               "--ray-address", cluster.address, *BULK, *extra]  # fmt: skip
    return subprocess.Popen(
        command, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _finish(driver: subprocess.Popen, timeout: float = 300) -> tuple[int, str]:
    _, stderr = driver.communicate(timeout=timeout)
    return driver.returncode, stderr


def _report(s3_server, bucket: str) -> dict:
    return json.loads(s3_server.client().get_object(Bucket=bucket, Key="out/batch_report.json")["Body"].read())


def _keys(s3_server, bucket: str, prefix: str) -> set[str]:
    return {
        item["Key"] for item in s3_server.client().list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    }


def _frames(s3_server, bucket: str, key: str, folder: Path) -> np.ndarray:
    path = folder / key.replace("/", "_")
    s3_server.client().download_file(bucket, key, str(path))
    return decode_frames(path)


def _reference(folder: Path, index: int) -> np.ndarray:
    """What ``avatargen render`` makes of job ``index`` (in this process, the same config)."""
    from avatargen.config.loader import load_config
    from avatargen.render import RenderRequest, render

    output = folder / "reference" / f"v{index}.mp4"
    render(RenderRequest(image=folder / "face.png", audio=folder / f"a{index}.wav", output=output), load_config(BULK),
           warn=lambda message: None)  # fmt: skip
    return decode_frames(output)


def _wait_for(condition, driver: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert driver.poll() is None, driver.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)


def _worker_of(s3_server, bucket: str, output: str) -> int:
    """The pid of the worker that holds ``output``'s claim in the bucket."""
    body = s3_server.client().get_object(Bucket=bucket, Key=f"out/{Path(output).stem}.lock")["Body"].read()
    return int(json.loads(body)["pid"])


def test_jobs_spread_over_two_nodes_give_the_frames_of_avatargen_render_and_a_bad_row_fails_alone(
    s3_server, bucket, s3_env, ray_cluster, tmp_path
):  # fmt: skip
    upload_jobs(s3_server, bucket, tmp_path, [0.8, 0.4, 0.6, 0.4, 0.8, 0.4], bad_rows=1)
    code, stderr = _finish(_driver(ray_cluster, bucket, s3_env))
    assert code == 2, stderr  # the one failure is bad input
    assert "2 worker(s) of 1 CPU, 1 GPU" in stderr  # a GPU cluster's workers reserve a GPU by default
    report = _report(s3_server, bucket)
    assert report["engine"] == "ray" and report["workers"] == 2
    jobs = report["jobs"]
    assert [j["status"] for j in jobs] == ["ok"] * 6 + ["failed"]
    assert jobs[6]["exit_code"] == 2 and jobs[6]["attempts"] == 1 and "missing audio" in jobs[6]["error"]  # not retried
    assert len({j["worker"] for j in jobs[:6]}) == 2  # both nodes' workers rendered
    for index in range(6):
        assert np.array_equal(_frames(s3_server, bucket, f"out/v{index}.mp4", tmp_path), _reference(tmp_path, index)), (
            index
        )


def test_two_drivers_on_one_out_dir_never_render_a_job_twice(s3_server, bucket, s3_env, ray_cluster, tmp_path):
    upload_jobs(s3_server, bucket, tmp_path, [0.6, 0.6, 0.6, 0.6, 0.6, 0.6])
    drivers = [_driver(ray_cluster, bucket, s3_env, "batch.ray.workers=1") for _ in range(2)]
    ran: dict[int, list[str]] = {}
    for driver in drivers:
        code, stderr = _finish(driver)
        assert code == 0, stderr
        for line in stderr.splitlines():  # a line for each job a worker rendered, or began and dropped
            if ": job " in line:
                ran.setdefault(int(line.split(": job ")[1].split()[0]), []).append(line)
    assert sorted(ran) == list(range(6)) and all(len(lines) == 1 and " ok: " in lines[0] for lines in ran.values()), ran
    assert _keys(s3_server, bucket, "out/v") == {f"out/v{i}.mp4" for i in range(6)} | {
        f"out/v{i}.yaml" for i in range(6)
    }


def test_ray_workers_share_a_local_out_dir_with_the_file_lock_workers_format(ray_cluster, tmp_path):
    """An out-dir on a file system (one every node mounts; here, this machine's): the same files, claims and status
    as the file-lock workers'; the rows that fail report as they do there."""
    from tests.conftest import FAST, write_face_png, write_speechlike_wav

    write_face_png(tmp_path / "face.png")
    rows = [{"image": "face.png", "audio": write_speechlike_wav(tmp_path / f"a{i}.wav", 0.4).name, "output": f"v{i}.mp4"}
            for i in range(3)] + [{"image": "face.png", "audio": "missing.wav", "output": "gone.mp4"}]  # fmt: skip
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / "out"
    result = run_cli("batch", str(jobs), "--out-dir", str(out), "--ray-address", ray_cluster.address, *FAST)
    assert result.returncode == 2, result.stderr
    assert all((out / f"v{i}.mp4").is_file() for i in range(3)) and not list(out.glob("*.lock"))
    assert "missing.wav" in json.loads((out / "gone.failed.json").read_text())["error"]
    status = json.loads(run_cli("batch", "status", str(out), "--json").stdout)
    assert (status["done"], status["failed"], status["running"], status["pending"]) == (3, 1, 0, 0)
    again = run_cli("batch", str(jobs), "--out-dir", str(out), *FAST)  # the file-lock workers take over the out-dir
    report = json.loads((out / "batch_report.json").read_text())
    assert again.returncode == 2 and [j["status"] for j in report["jobs"]] == ["skipped"] * 3 + ["failed"]


@pytest.mark.slow
def test_a_node_killed_mid_job_loses_nothing_the_job_resumes_on_the_other_node_bit_exact(
    s3_server, bucket, s3_env, tmp_path
):
    """Its own cluster: this test takes a node away. SIGKILL of the raylet running job 0 and of everything it started
    (the worker, its render's encoder), after the job's second checkpoint reached the bucket: a pre-empted VM."""
    saved = dict(os.environ)
    cluster = RayCluster(2, {"PYTHONPATH": str(REPO), **s3_server.env})
    try:
        upload_jobs(s3_server, bucket, tmp_path, [8.0, 0.4, 0.4, 0.4])
        driver = _driver(cluster, bucket, s3_env)
        resume_point = partial(bucket_resume_point, s3_server, f"s3://{bucket}/out/v0.mp4", tmp_path / "probe")
        _wait_for(lambda: (resume_point() or 0) >= 62, driver)  # its 2nd checkpoint and the video up to it copied
        raylet = parent_pid(_worker_of(s3_server, bucket, "v0.mp4"))
        assert raylet in cluster.raylet_pids()
        kill_tree(raylet)
        code, stderr = _finish(driver)
        assert code == 0, stderr
        assert "job 0 lost its worker" in stderr, stderr
        job = _report(s3_server, bucket)["jobs"][0]
        assert job["status"] == "ok" and job["attempts"] == 2 and job["resumed_from"] >= 62, job  # not from zero
        assert _keys(s3_server, bucket, "out/v0") == {"out/v0.mp4", "out/v0.yaml"}  # no claim, no state left behind
        assert np.array_equal(_frames(s3_server, bucket, "out/v0.mp4", tmp_path), _reference(tmp_path, 0))
    finally:
        cluster.shutdown()
        os.environ.clear()
        os.environ.update(saved)


@pytest.mark.slow
def test_ctrl_c_on_the_driver_keeps_the_running_jobs_and_the_same_command_finishes_them_once(
    s3_server, bucket, s3_env, ray_cluster, tmp_path
):  # fmt: skip
    # 20 s: on a quiet machine an 8-s job finished between its first checkpoint and the Ctrl-C
    upload_jobs(s3_server, bucket, tmp_path, [20.0, 0.4, 0.4])
    driver = _driver(ray_cluster, bucket, s3_env)
    _wait_for(lambda: "out/v0.resume/state-62.safetensors" in _keys(s3_server, bucket, "out/v0.resume/"), driver)
    status = json.loads(run_cli("batch", "status", f"s3://{bucket}/out", "--json", env=s3_env).stdout)
    running = [j for j in status["jobs"] if j["state"] == "running"]
    assert [j["output"] for j in running] == [f"s3://{bucket}/out/v0.mp4"], status  # where, while the run goes on
    assert running[0]["pid"] == _worker_of(s3_server, bucket, "v0.mp4") and running[0]["resumable"]
    time.sleep(1.0)
    driver.send_signal(signal.SIGINT)
    code, stderr = _finish(driver, timeout=120)
    assert code == 130 and "continue with: avatargen batch" in stderr.strip().splitlines()[-1], stderr
    report = _report(s3_server, bucket)
    assert report["exit_code"] == 130 and report["jobs_total"] == 3, report  # the report said 0: a success
    assert report["not_started"] == 3 - len(report["jobs"])
    first = {j["index"]: j for j in report["jobs"]}
    assert first[0]["status"] == "stopped" and "out/v0.mp4" not in _keys(s3_server, bucket, "out/")
    assert "out/v0.lock" not in _keys(s3_server, bucket, "out/")  # the stopped job's claim is released at once
    code, stderr = _finish(_driver(ray_cluster, bucket, s3_env))
    assert code == 0, stderr
    second = {j["index"]: j for j in _report(s3_server, bucket)["jobs"]}
    assert second[0]["status"] == "ok" and second[0]["resumed_from"] >= 62, second[0]  # continued, not redone
    for index in (1, 2):  # finished in one run or the other, never in both
        assert [first.get(index, {}).get("status"), second[index]["status"]].count("ok") == 1, (first, second)
    assert np.array_equal(_frames(s3_server, bucket, "out/v0.mp4", tmp_path), _reference(tmp_path, 0))
