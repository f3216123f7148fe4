"""`model=wan_tiny` through the real CLI at the issue's lengths: a 10 s dub of a 6 s and of a 20 s source video and
a two-speaker render from two WAVs, each stopped by SIGINT, resumed, and equal to the uninterrupted render frame for
frame, with the exact frame count and the audio muxed. Slow (each case three CLI renders of 10 s); the fast suite
holds the same properties at 1-2 s (tests/pipeline/test_wan_dub_and_speakers.py, tests/cli/test_dub_and_speakers.py).

    python -m pytest -q -m slow tests/cli/test_wan_dub_resume.py
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from avatargen.io.ffmpeg import ffmpeg_exe
from tests.conftest import FAST, REPO, run_cli, write_speechlike_wav
from tests.ffmpeg_probe import decode_frames, probe

WAN = ["model=wan_tiny", "model.wan.sampling_steps=1", "output.gop_seconds=0.32", *FAST]


def _source(path, seconds: float):
    subprocess.run([ffmpeg_exe(), "-v", "error", "-y", "-f", "lavfi", "-i", f"testsrc=size=128x96:rate=25:duration={seconds}",
                    "-pix_fmt", "yuv420p", str(path)], check=True)  # fmt: skip
    return path


def _interrupted_then_resumed(tmp_path, request: list[str], frames: int, seconds: float) -> None:
    reference, out = tmp_path / "reference.mp4", tmp_path / "o.mp4"
    result = run_cli(*request, "-o", str(reference), timeout=900)
    assert result.returncode == 0, result.stderr
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen([sys.executable, "-m", "avatargen", *request, "-o", str(out)], env=env,
                               start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    folder, deadline = out.with_name("o.resume"), time.monotonic() + 300
    while len(list(folder.glob("state-*.safetensors"))) < 1:
        assert process.poll() is None, "the render ended before it could be stopped"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(2.0)  # a few more clips
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 130, stderr
    assert 0 < probe(out.with_name("o.partial.mp4"))["frames"] < frames
    result = run_cli(*request, "-o", str(out), "--resume", timeout=900)
    assert result.returncode == 0, result.stderr
    assert "rendering from the start" not in result.stderr
    info = probe(out)
    assert info["frames"] == frames and info["audio_codec"] == "aac" and abs(info["audio_duration_s"] - seconds) < 0.05
    assert np.array_equal(decode_frames(out), decode_frames(reference)), "resumed frames differ from an uninterrupted render"


@pytest.mark.slow
@pytest.mark.parametrize("source_s", [6.0, 20.0])
def test_a_10_s_dub_resumes_bit_exact(tmp_path, source_s):
    speech = write_speechlike_wav(tmp_path / "speech.wav", 10.0)
    video = _source(tmp_path / "source.mp4", source_s)
    _interrupted_then_resumed(tmp_path, ["render", "--video", str(video), "-a", str(speech), "-q", *WAN], 250, 10.0)


@pytest.mark.slow
def test_two_speakers_resume_bit_exact(tmp_path, face_png):
    left = write_speechlike_wav(tmp_path / "left.wav", 6.0)
    right = write_speechlike_wav(tmp_path / "right.wav", 4.0, rate=16000)
    request = ["render", "-i", str(face_png), "-a", str(left), "-a", str(right), "--audio-type", "add", "-q", *WAN]
    _interrupted_then_resumed(tmp_path, request, 250, 10.0)
