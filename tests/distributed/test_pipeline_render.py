"""One ``model=liveavatar_tiny`` video as a pipeline of its denoising steps over CPU ranks (torchrun, gloo, one thread
a rank: ``runtime.pipeline_parallel``, avatargen/runtime/pipeline_parallel.py): the MP4's frames against a single
process's (x264 at ``output.crf=0``: lossless on the YUV frames, so any pixel that differs shows), a stop by SIGINT
resumed to the uninterrupted frames, a rank that fails, and the refusals a user meets in one process.

Each stage runs its steps with the same code, inputs and thread count as one process, so the frames are equal
exactly; rank 0 runs the last steps and decodes, rank 1 makes each block's noise and audio features.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.conftest import FAST, REPO, descendants, run_cli, write_speechlike_wav
from tests.distributed.torchrun import torchrun
from tests.ffmpeg_probe import decode_frames, probe

# 64 x 64 frames, 12-frame blocks, a checkpoint after every block; crf 0: no frame difference hides in the encoding
TINY = ["model=liveavatar_tiny", "pipeline.image_fit=crop", "output.gop_seconds=0.48", "output.crf=0", *FAST]


def _single(tmp_path, face_png, audio) -> np.ndarray:
    out = tmp_path / "single.mp4"
    result = run_cli("render", "-i", str(face_png), "-a", str(audio), "-o", str(out), "-q", *TINY)
    assert result.returncode == 0, result.stderr
    return decode_frames(out)


def _pipeline(tmp_path, face_png, audio, ranks: int) -> tuple[np.ndarray, dict]:
    out = tmp_path / f"ranks{ranks}" / "o.mp4"
    result = torchrun("render", "-i", str(face_png), "-a", str(audio), "-o", str(out), "-q", "--json", *TINY,
                      f"runtime.pipeline_parallel={ranks}", nproc=ranks, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in out.parent.iterdir()) == ["o.mp4", "o.yaml"]  # rank 0 writes alone
    report = next(json.loads(line) for line in result.stdout.splitlines() if '"parallel"' in line)  # rank 0's
    return decode_frames(out), report


@pytest.mark.slow  # ~45 s; .ci/run's slow step holds 2 stages, stopped and resumed, to one process's frames
def test_two_stages_give_the_single_process_frames(tmp_path, face_png):
    audio = write_speechlike_wav(tmp_path / "a.wav", 1.0)  # 25 frames: blocks of 12, 12 and 1
    single = _single(tmp_path, face_png, audio)
    frames, report = _pipeline(tmp_path, face_png, audio, 2)
    assert report["parallel"] == {"world": 2, "guidance": 1, "sequence": 1, "replicas": 1,
                                  "weights": "whole on every rank", "pipeline": 2}  # fmt: skip
    assert report["frames"] == 25 and frames.shape == single.shape == (25, 64, 64, 3)
    assert np.array_equal(frames, single), f"frames differ by up to {np.abs(frames.astype(int) - single).max()}"


@pytest.mark.slow  # a two-rank batch of two jobs and a render in one process: ~30 s on the shared 2-core machine
def test_a_shard_mode_batch_runs_each_job_through_the_pipeline_with_the_single_process_frames(tmp_path, face_png):
    """Two jobs in one process group: the second starts with fresh rings (nothing of the first leaks into it)."""
    audio = write_speechlike_wav(tmp_path / "a.wav", 1.0)
    single = _single(tmp_path, face_png, audio)
    jobs = tmp_path / "jobs.csv"
    jobs.write_text(f"image,audio,output\n{face_png},{audio},v0.mp4\n{face_png},{audio},v1.mp4\n")
    out = tmp_path / "out"
    result = torchrun("batch", str(jobs), "--out-dir", str(out), *TINY, "runtime.pipeline_parallel=2",
                      "runtime.batch_mode=shard", timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    for name in ("v0.mp4", "v1.mp4"):
        assert np.array_equal(decode_frames(out / name), single), name


@pytest.mark.slow  # a four-rank torchrun and a render in one process: ~47 s on the shared 2-core machine
def test_four_stages_give_the_single_process_frames(tmp_path, face_png):
    audio = write_speechlike_wav(tmp_path / "a.wav", 1.0)
    single = _single(tmp_path, face_png, audio)
    frames, report = _pipeline(tmp_path, face_png, audio, 4)
    assert report["parallel"]["pipeline"] == 4
    assert np.array_equal(frames, single)


@pytest.mark.parametrize("overrides, message", [
    (["runtime.pipeline_parallel=2"], "model=tiny cannot spread its denoising steps over ranks"),
    (["model=liveavatar_tiny", "runtime.pipeline_parallel=2"], "run torchrun --nproc-per-node 2"),
    (["model=liveavatar_tiny", "runtime.pipeline_parallel=5"], "at most 4 stages"),
])  # fmt: skip
def test_a_pipeline_one_process_cannot_run_is_refused_in_one_line(tmp_path, face_png, overrides, message):
    audio = write_speechlike_wav(tmp_path / "a.wav", 0.5)
    result = run_cli("render", "-i", str(face_png), "-a", str(audio), "-o", str(tmp_path / "o.mp4"), "-q", *FAST,
                     "pipeline.image_fit=crop", *overrides)  # fmt: skip
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "o.mp4").exists()


@pytest.mark.slow  # a render in one process, a two-rank torchrun stopped, the resume: ~45 s each on the shared 2-core machine
@pytest.mark.parametrize("resumed_on", [2, 1])  # the same 2 stages, or one process (the resume point is the same)
def test_a_pipeline_stopped_by_sigint_resumes_to_the_uninterrupted_frames(tmp_path, face_png, resumed_on):
    audio = write_speechlike_wav(tmp_path / "a.wav", 3.0)  # 75 frames: 7 blocks, a resume point after each
    out = tmp_path / "out" / "o.mp4"
    request = ["render", "-i", str(face_png), "-a", str(audio), "-q", *TINY]
    uninterrupted = _single(tmp_path, face_png, audio)  # (the pipeline's frames are one process's)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "avatargen",
               *request, "runtime.pipeline_parallel=2", "-o", str(out)]  # fmt: skip
    process = subprocess.Popen(command, env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    folder, deadline = out.with_name("o.resume"), time.monotonic() + 180
    try:
        while not list(folder.glob("state-*.safetensors")):  # the first resume point: both stages' rings in it
            assert process.poll() is None, "the render ended before it could be stopped"
            assert time.monotonic() < deadline
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)  # to torchrun, which passes it on to both ranks
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert "interrupted by SIGINT" in stderr, stderr[-3000:]
    assert 0 < probe(out.with_name("o.partial.mp4"))["frames"] < 75
    if resumed_on == 2:
        result = torchrun(*request, "runtime.pipeline_parallel=2", "-o", str(out), "--resume")
    else:
        result = run_cli(*request, "-o", str(out), "--resume")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "rendering from the start" not in result.stderr  # it continued from rank 0's resume point
    assert sorted(p.name for p in out.parent.iterdir()) == ["o.mp4", "o.yaml"]
    assert probe(out)["frames"] == 75
    assert np.array_equal(decode_frames(out), uninterrupted), "resumed frames differ from an uninterrupted render"


def _rank_pid(torchrun_pid: int, rank: int) -> int | None:
    """The process id of torchrun's worker of global rank ``rank``: the first descendant (children come before
    grandchildren, e.g. the worker's ffmpeg) whose environment says RANK=rank."""
    for pid in descendants(torchrun_pid):
        try:
            environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in environ:
            return pid
    return None


@pytest.mark.slow  # a two-rank torchrun: ~20 s on the shared 2-core machine
def test_a_signal_to_rank_0_alone_stops_the_pipeline_between_blocks(tmp_path, face_png):
    audio = write_speechlike_wav(tmp_path / "a.wav", 3.0)
    out = tmp_path / "o.mp4"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "avatargen",
               "render", "-i", str(face_png), "-a", str(audio), "-o", str(out), "-q", *TINY,
               "runtime.pipeline_parallel=2"]  # fmt: skip
    process = subprocess.Popen(command, env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 180
    try:
        while not list(out.with_name("o.resume").glob("state-*.safetensors")):
            assert process.poll() is None, "the render ended before it could be stopped"
            assert time.monotonic() < deadline
            time.sleep(0.05)
        rank0 = _rank_pid(process.pid, 0)
        assert rank0 is not None
        os.kill(rank0, signal.SIGINT)  # rank 1, the first stage, never sees a signal: it reads the stop in the store
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert "interrupted by SIGINT" in stderr, stderr[-3000:]
    assert 0 < probe(out.with_name("o.partial.mp4"))["frames"] < 75


@pytest.mark.slow  # a two-rank torchrun: ~20 s on the shared 2-core machine
def test_a_stage_failing_mid_render_stops_the_pipeline_with_one_line_and_keeps_the_resume_point(tmp_path, face_png):
    audio = write_speechlike_wav(tmp_path / "a.wav", 2.0)
    out = tmp_path / "o.mp4"
    started = time.monotonic()
    # rank 1 (steps 0 and 1) fails in block 2's second step: blocks 0 and 1 are out, each with its resume point
    result = torchrun("1", "render", "-i", str(face_png), "-a", str(audio), "-o", str(out), "-q", *TINY,
                      "runtime.pipeline_parallel=2", "runtime.dist_timeout_s=60", module="tests.distributed.faulty_rank",
                      env_extra={"AVATARGEN_TEST_FAULT_CALL": "6"}, timeout=150)  # fmt: skip
    assert result.returncode != 0
    assert time.monotonic() - started < 60 + 30  # within runtime.dist_timeout_s (and the start-up)
    lines = [line for line in result.stderr.splitlines() if line.startswith("error: rank 1 of 2 failed")]
    assert len(lines) == 1, result.stderr[-3000:]  # rank 0, waiting for block 2, names the rank that failed
    assert "test fault on rank 1" in lines[0] and "o.partial.mp4" in lines[0] and "resume with" in lines[0]
    assert list(out.with_name("o.resume").glob("state-*.safetensors")), "the resume point was not kept"
    assert probe(out.with_name("o.partial.mp4"))["frames"] in (12, 24)  # block 1 may still be on its way
