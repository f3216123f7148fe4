"""``python -m avatargen.torchrun``: torchrun's launch, ended as avatargen ends a command (a rank's one line and its
exit code, not torchrun's ChildFailedError report and exit 1), and a SIGKILLed stage named by the rank that reports."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from avatargen.torchrun import split_arguments
from tests.conftest import FAST, REPO, write_face_png, write_speechlike_wav
from tests.ffmpeg_probe import probe

ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def test_torchruns_options_end_where_avatargens_command_begins() -> None:
    commands = {"render", "batch", "config"}
    assert split_arguments(["--standalone", "--nproc-per-node", "2", "render", "-i", "a.png"], commands) == (
        ["--standalone", "--nproc-per-node", "2"], ["render", "-i", "a.png"])  # fmt: skip
    assert split_arguments(["--rdzv-id", "render", "--nnodes=2", "batch", "j.csv"], commands) == (
        ["--rdzv-id", "render", "--nnodes=2"], ["batch", "j.csv"])  # a value named like a command is a value  # fmt: skip


def test_the_launcher_without_a_command_says_which_in_one_line_and_help_shows_its_usage() -> None:
    # both ended in a TypeError traceback (a command group's name is a placeholder until Click builds it)
    for args, code in ((["--nproc-per-node", "1"], 2), (["--help"], 0)):
        done = subprocess.run([sys.executable, "-m", "avatargen.torchrun", *args], capture_output=True, text=True,
                              env=ENV, timeout=60)  # fmt: skip
        assert done.returncode == code and "Traceback" not in done.stderr, done.stderr
        assert "render, synth, train, weights" in (done.stderr if code else done.stdout)


def test_a_refusal_under_the_launcher_is_the_ranks_line_and_exit_2(tmp_path) -> None:
    """Plain torchrun follows it with its ~25-line ChildFailedError report and exits 1."""
    face = write_face_png(tmp_path / "face.png")
    done = subprocess.run([sys.executable, "-m", "avatargen.torchrun", "--standalone", "--nproc-per-node", "1",
                           "render", "-i", str(face), "-a", str(tmp_path / "nope.wav"), "-o", str(tmp_path / "o.mp4"),
                           *FAST], capture_output=True, text=True, env=ENV, timeout=180)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [f"error: audio file '{tmp_path / 'nope.wav'}' does not exist; check the "
                                                "path"], done.stderr  # fmt: skip


@pytest.mark.slow  # a two-rank pipeline killed, then resumed by the command it printed: ~60 s on the 2-core machine
def test_a_stage_killed_by_sigkill_is_named_and_the_printed_command_resumes(tmp_path) -> None:
    """Rank 0 used to print gloo's 'unexpected RuntimeError ... Connection reset by peer ... GLHF!'."""
    from tests.distributed.test_pipeline_render import TINY, _rank_pid

    face, audio = write_face_png(tmp_path / "face.png"), write_speechlike_wav(tmp_path / "a.wav", 3.0)
    out = tmp_path / "o.mp4"
    process = subprocess.Popen([sys.executable, "-m", "avatargen.torchrun", "--standalone", "--nproc-per-node", "2",
                                "render", "-i", str(face), "-a", str(audio), "-o", str(out), "-q", *TINY,
                                "runtime.pipeline_parallel=2"], env=ENV, start_new_session=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 180
    try:
        while not list(out.with_name("o.resume").glob("state-*.safetensors")):
            assert process.poll() is None and time.monotonic() < deadline, "the render ended before it was killed"
            time.sleep(0.05)
        os.kill(_rank_pid(process.pid, 1), signal.SIGKILL)  # the first stage, as the OOM killer would
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 128 + signal.SIGKILL, stderr  # the first rank that failed: by SIGKILL
    lines = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and lines[0].startswith("error: rank 1 of 2 ended without a word"), stderr
    assert "Traceback" not in stderr and "GLHF" not in stderr, stderr
    command = lines[0].split("resume with: ", 1)[1]
    assert " -m avatargen.torchrun --standalone --nproc-per-node 2 render " in command, command
    resumed = subprocess.run(command, shell=True, env=ENV, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "rendering from the start" not in resumed.stderr and probe(out)["frames"] == 75
