"""`model=wan_tiny`: a render stopped by SIGINT continues with --resume from its last clip (the motion frames and the
VAE decoder's causal past; with I chunks also the clip's latents not yet shown), and the joined video is exactly the
uninterrupted one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.conftest import FAST, REPO, run_cli, write_speechlike_wav
from tests.ffmpeg_probe import decode_frames, probe

WAN = ["model=wan_tiny", "output.gop_seconds=0.32", *FAST]  # a keyframe, so a resume point, every 8-frame clip


@pytest.mark.slow  # three CLI runs: ~45 s on the shared 2-core machine (tests/pipeline/test_wan_seams.py: in-process)
@pytest.mark.parametrize("interpolate", ["false", "true"])
def test_sigint_then_resume_gives_the_uninterrupted_frames(tmp_path, face_png, interpolate):
    audio = write_speechlike_wav(tmp_path / "a.wav", 2.0)
    reference, out = tmp_path / "reference.mp4", tmp_path / "o.mp4"
    request = ["render", "-i", str(face_png), "-a", str(audio), "-q", *WAN, f"pipeline.interpolate={interpolate}"]
    assert run_cli(*request, "-o", str(reference)).returncode == 0
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen([sys.executable, "-m", "avatargen", *request, "-o", str(out)], env=env,
                               start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    folder, deadline = out.with_name("o.resume"), time.monotonic() + 120
    while not list(folder.glob("state-*.safetensors")):  # the first resume point
        assert process.poll() is None, "the render ended before it could be stopped"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert 0 < probe(out.with_name("o.partial.mp4"))["frames"] < 50
    result = run_cli(*request, "-o", str(out), "--resume")
    assert result.returncode == 0, result.stderr
    assert "rendering from the start" not in result.stderr  # it continued from the resume point
    assert probe(out)["frames"] == 50
    assert np.array_equal(decode_frames(out), decode_frames(reference)), "resumed frames differ from an uninterrupted render"
