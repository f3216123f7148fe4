"""Inputs that used to be accepted without a word, or refused with a misleading line: each is now one line naming the
problem and the fix, exit 2, and nothing written."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.conftest import FAST, REPO, run_cli, write_face_png, write_speechlike_wav


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("refused")
    return write_face_png(folder / "face.png"), write_speechlike_wav(folder / "a.wav", 0.4)


@pytest.mark.parametrize("extra, says", [
    (["--face", "0"], "numbered from 1"),
    (["--face", "-1"], "numbered from 1"),
    (["--face", "1", "pipeline.image_fit=crop"], "leave out --face"),
    (["--face", "3", "pipeline.image_fit=pad"], "leave out --face"),
    (["--audio-type", "add"], "with one -a leave it out"),
])  # fmt: skip
def test_an_option_that_would_do_nothing_is_refused_in_one_line(tmp_path, inputs, extra, says):
    face, audio = inputs
    out = tmp_path / "o.mp4"
    result = run_cli("render", "-i", str(face), "-a", str(audio), "-o", str(out), "-q", *FAST, *extra)
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("note:")]
    assert result.returncode == 2 and len(lines) == 1 and says in lines[0], result.stderr
    assert not list(tmp_path.iterdir())


def test_zero_raw_audio_channels_are_refused_not_read_as_one(tmp_path, inputs):
    face, _ = inputs
    result = run_cli("render", "-i", str(face), "-a", "-", "--audio-rate", "16000", "--audio-channels", "0",
                     "-o", str(tmp_path / "o.mp4"), "-q", *FAST, input=b"\0" * 32000, text=False)  # fmt: skip
    assert result.returncode == 2 and b"must be positive" in result.stderr, result.stderr


def test_nan_in_a_resume_state_blames_the_state_not_a_checkpoint(tmp_path, inputs):
    face, _ = inputs
    audio = write_speechlike_wav(tmp_path / "long.wav", 4.0)
    out = tmp_path / "o.mp4"
    command = [sys.executable, "-m", "avatargen", "render", "-i", str(face), "-a", str(audio), "-o", str(out), "-q", *FAST]
    process = subprocess.Popen(command, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    folder = tmp_path / "o.resume"
    deadline = time.monotonic() + 120
    while len(list(folder.glob("state-*.safetensors"))) < 2 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    process.communicate(timeout=120)
    assert process.returncode == 130
    for state in folder.glob("state-*.safetensors"):
        tensors = load_file(str(state))
        name = next(n for n, t in tensors.items() if t.is_floating_point())
        tensors[name] = torch.full_like(tensors[name], float("nan"))
        save_file(tensors, str(state))
    result = run_cli("render", "-i", str(face), "-a", str(audio), "-o", str(out), "-q", *FAST, "--resume")
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("note:")]
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert "is damaged" in lines[0] and "without --resume" in lines[0] and "a2v" not in lines[0].lower(), lines
    assert folder.is_dir()  # nothing of the stopped render is deleted by the refusal


def _wan_refusal(tmp_path: Path, image: Path, overrides: tuple[str, ...] = (), **request) -> str:
    """The one-line refusal of a ``model=wan_tiny`` render (in-process), before a frame; nothing written."""
    from avatargen.config.loader import load_config
    from avatargen.errors import BadInputError
    from avatargen.render import RenderRequest, render

    speech = write_speechlike_wav(tmp_path / "speech.wav", 0.3)
    fields = {"image": image, "audio": speech, "output": tmp_path / "out" / "o.mp4", **request}
    with pytest.raises(BadInputError) as error:
        render(RenderRequest(**fields), load_config(["model=wan_tiny", *overrides, *FAST]), warn=lambda _: None)
    assert not (tmp_path / "out").exists()
    assert "\n" not in str(error.value)
    return str(error.value)


def test_two_speaker_and_aspect_ratio_cases_are_refused_not_ignored(tmp_path, inputs):
    from PIL import Image

    face, _ = inputs
    other = write_speechlike_wav(tmp_path / "other.wav", 0.3)
    assert "give at most 2 -a" in _wan_refusal(tmp_path, face, extra_audio=(other, other))
    assert "frames the whole picture" in _wan_refusal(tmp_path, face, ("pipeline.face=1",))
    assert "two speakers are placed" in _wan_refusal(tmp_path, face, ("pipeline.face=2",), extra_audio=(other,))
    tall = tmp_path / "tall.png"  # 300x400: the model frames its middle 300x300 square
    Image.new("RGB", (300, 400), (70, 110, 160)).save(tall)
    message = _wan_refusal(tmp_path, tall, extra_audio=(other,), person_boxes=((0, 0, 150, 40), (150, 0, 300, 400)))
    assert "--person-box 0,0,150,40 lies outside the part of the picture the model frames" in message
