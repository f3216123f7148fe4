"""`avatargen batch` workers claiming jobs through the output lock: any number of workers, no coordinator."""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from avatargen.bulk.batch import run_batch
from tests.conftest import FAST, REPO, kill_tree, run_cli, write_face_png, write_speechlike_wav
from tests.ffmpeg_probe import decode_frames, probe

_DONE = re.compile(r"job (\d+) ok: .*?(?:, resumed from frame (\d+))?$")
_FAILED = re.compile(r"job (\d+) failed")


def _jobs(folder: Path, seconds: list[float], bad: set[int] = frozenset()) -> Path:
    write_face_png(folder / "face.png")
    rows = []
    for index, length in enumerate(seconds):
        audio = "missing.wav" if index in bad else write_speechlike_wav(folder / f"a{index}.wav", length).name
        rows.append({"image": "face.png", "audio": audio, "output": f"v{index}.mp4"})
    jobs = folder / "jobs.jsonl"
    jobs.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    return jobs


def _worker(jobs: Path, out: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "avatargen", "batch", str(jobs), "--out-dir", str(out), *FAST, *extra],
                            env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def _finish(worker: subprocess.Popen) -> str:
    _, stderr = worker.communicate(timeout=300)
    return stderr


def _lines(stderr: str, pattern: re.Pattern) -> list[re.Match]:
    return [m for line in stderr.splitlines() if (m := pattern.search(line))]


def test_a_bad_job_fails_once_whatever_the_number_of_workers_and_is_retried_only_when_asked(tmp_path):
    jobs = _jobs(tmp_path, [0.4, 0.4, 0.4], bad={1})
    out = tmp_path / "out"
    workers = [_worker(jobs, out) for _ in range(2)]
    stderrs = [_finish(w) for w in workers]
    assert [w.returncode for w in workers] == [2, 2], stderrs  # every worker's batch holds the failure
    failures = [m.group(1) for stderr in stderrs for m in _lines(stderr, _FAILED)]
    assert failures == ["1"], stderrs  # tried, and reported, by one worker only
    assert sorted(m.group(1) for stderr in stderrs for m in _lines(stderr, _DONE)) == ["0", "2"]
    assert json.loads((out / "v1.failed.json").read_text())["exit_code"] == 2
    status = run_cli("batch", "status", str(out), "--json")
    assert status.returncode == 0, status.stderr
    summary = json.loads(status.stdout)
    assert (summary["done"], summary["failed"], summary["running"], summary["pending"]) == (2, 1, 0, 0)
    assert "missing.wav" in next(j["error"] for j in summary["jobs"] if j["state"] == "failed")
    said: list[str] = []
    assert run_batch(jobs, out, FAST, warn=said.append) == 2 and not _lines("\n".join(said), _FAILED)  # not retried
    assert run_batch(jobs, out, FAST, warn=said.append, retry_failed=True) == 2
    assert [m.group(1) for m in _lines("\n".join(said), _FAILED)] == ["1"]  # retried once, when asked


def test_a_row_that_cannot_run_is_reported_by_one_worker_only(tmp_path):
    jobs = _jobs(tmp_path, [0.4])
    with jobs.open("a") as rows:  # job 1: not JSON; job 2: no audio
        rows.write('{"image": "face.png", "audio": \n' + json.dumps({"image": "face.png", "output": "v2.mp4"}) + "\n")
    out = tmp_path / "out"
    workers = [_worker(jobs, out) for _ in range(2)]
    stderrs = [_finish(w) for w in workers]
    assert [w.returncode for w in workers] == [2, 2], stderrs  # every worker's report holds both bad rows
    assert sorted(m.group(1) for stderr in stderrs for m in _lines(stderr, _FAILED)) == ["1", "2"], stderrs
    assert [m.group(1) for stderr in stderrs for m in _lines(stderr, _DONE)] == ["0"]
    report = json.loads((out / "batch_report.json").read_text())
    assert "line 2: not valid JSON" in report["jobs"][1]["error"] and "missing audio" in report["jobs"][2]["error"]
    status = json.loads(run_cli("batch", "status", str(out), "--json").stdout)
    assert (status["done"], status["failed"], status["running"], status["pending"]) == (1, 2, 0, 0)
    bad = [j for j in status["jobs"] if j["state"] == "failed"]
    assert [j["output"] for j in bad] == ["(job 1: its row of the jobs file cannot run)", "(job 2: its row of the jobs file cannot run)"]
    assert "not valid JSON" in bad[0]["error"] and "missing audio" in bad[1]["error"]


@pytest.mark.slow
def test_three_workers_render_every_job_once_and_the_same_frames_as_one_worker(tmp_path):
    jobs = _jobs(tmp_path, [0.9, 0.2, 0.5, 0.3, 0.8, 0.2, 0.6, 0.4, 0.3])  # uneven lengths
    out, alone = tmp_path / "out", tmp_path / "alone"
    workers = [_worker(jobs, out) for _ in range(3)]
    stderrs = [_finish(w) for w in workers]
    assert [w.returncode for w in workers] == [0, 0, 0], stderrs
    rendered = collections.Counter(m.group(1) for stderr in stderrs for m in _lines(stderr, _DONE))
    assert rendered == {str(i): 1 for i in range(9)}, stderrs  # every job once, by one worker
    single = run_cli("batch", str(jobs), "--out-dir", str(alone), *FAST)
    assert single.returncode == 0, single.stderr
    for index in range(9):
        assert np.array_equal(decode_frames(out / f"v{index}.mp4"), decode_frames(alone / f"v{index}.mp4")), index


@pytest.mark.slow
def test_a_worker_killed_mid_job_is_resumed_by_another_from_its_last_checkpoint(tmp_path):
    jobs = _jobs(tmp_path, [4.0, 0.4])
    out = tmp_path / "out"
    first = _worker(jobs, out)
    deadline = time.monotonic() + 120
    while len(list((out / "v0.resume").glob("state-*.safetensors"))) < 2:  # job 0 is the first's, 62 frames in
        assert first.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    first.send_signal(signal.SIGSTOP)  # frozen holding job 0 (its lock too), however slow the second is to start
    second = _worker(jobs, out)
    while not (out / "v1.mp4").exists():  # the second took job 1, and now waits for job 0
        assert second.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    kill_tree(first.pid)
    first.communicate()
    stderr = _finish(second)
    assert second.returncode == 0, stderr
    done = {m.group(1): m.group(2) for m in _lines(stderr, _DONE)}
    assert set(done) == {"0", "1"} and int(done["0"] or 0) > 0, stderr  # job 0 resumed, not rendered again from zero
    assert probe(out / "v0.mp4")["frames"] == 100 and not (out / "v0.resume").exists()
    alone = tmp_path / "alone"  # the same job rendered by one worker, never stopped
    single = run_cli("batch", str(jobs), "--out-dir", str(alone), *FAST)
    assert single.returncode == 0, single.stderr
    assert np.array_equal(decode_frames(out / "v0.mp4"), decode_frames(alone / "v0.mp4"))  # resumed: the same frames


def test_a_stopped_job_whose_config_changed_is_rendered_from_the_start_and_the_worker_says_why(tmp_path):
    jobs = _jobs(tmp_path, [4.0])
    out = tmp_path / "out"
    first = _worker(jobs, out)
    deadline = time.monotonic() + 120
    while not list((out / "v0.resume").glob("state-*.safetensors")):
        assert first.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    first.send_signal(signal.SIGINT)  # stopped at its next chunk: the job keeps its resume state
    _finish(first)
    assert first.returncode == 130 and (out / "v0.resume").is_dir()
    again = run_cli("batch", str(jobs), "--out-dir", str(out), *FAST, "seed=3")  # the same jobs, another seed
    assert again.returncode == 0, again.stderr
    notes = [line for line in again.stderr.splitlines() if "its stopped render is not resumed" in line]
    assert len(notes) == 1 and "(seed was 0, is 3)" in notes[0] and "from the start" in notes[0], again.stderr
    done = {m.group(1): m.group(2) for m in _lines(again.stderr, _DONE)}
    assert done == {"0": None}, again.stderr  # rendered from frame 0, not resumed
    assert probe(out / "v0.mp4")["frames"] == 100 and not (out / "v0.resume").exists()


def _slurm_answers() -> bool:
    import shutil

    if shutil.which("sbatch") is None or shutil.which("sinfo") is None:
        return False
    try:
        probe_run = subprocess.run(["sinfo", "-h", "-o", "%a"], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return False
    return probe_run.returncode == 0 and "up" in probe_run.stdout


@pytest.mark.slow
def test_a_slurm_array_of_workers_goes_through_the_jobs(tmp_path):
    if not _slurm_answers():
        pytest.skip("no Slurm cluster answers (tests/distributed/slurm_one_node.sh starts one)")
    jobs = _jobs(tmp_path, [0.4, 0.3, 0.5, 0.2])
    out = tmp_path / "out"
    command = " ".join([sys.executable, "-m", "avatargen", "batch", str(jobs), "--out-dir", str(out), *FAST])
    submitted = subprocess.run(
        ["sbatch", "--array=0-2", "--wait", "--cpus-per-task=1", f"--output={tmp_path}/slurm-%A_%a.out",
         f"--export=ALL,PYTHONPATH={REPO}", "--wrap", command],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    logs = "\n".join(p.read_text() for p in sorted(tmp_path.glob("slurm-*.out")))
    assert len(list(tmp_path.glob("slurm-*.out"))) == 3
    rendered = collections.Counter(m.group(1) for m in _lines(logs, _DONE))
    assert rendered == {str(i): 1 for i in range(4)}, logs  # every job once, by one of the array's tasks
    assert all(probe(out / f"v{i}.mp4")["frames"] > 0 for i in range(4))
