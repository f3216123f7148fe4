"""A model family defined inside the tests (tests/families/disc.py: a disc whose radius follows the audio's
loudness) registers itself through the ``avatargen.families`` entry point group and renders through the real
``avatargen render``: overlapped emission, a live HLS output, SIGINT and an exact ``--resume``, with no file of
avatargen edited for it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.conftest import REPO, write_face_png
from tests.ffmpeg_probe import decode_frames, probe

FPS = 25


@pytest.fixture(scope="module")
def family_env(tmp_path_factory) -> dict[str, str]:
    """An environment whose Python sees the disc family as an installed package's entry point."""
    site = tmp_path_factory.mktemp("site")
    info = site / "disc_family-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: disc-family\nVersion: 0\n")
    (info / "entry_points.txt").write_text("[avatargen.families]\ndisc = tests.families.disc:FAMILY\n")
    return {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{REPO}"}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> tuple[Path, Path]:
    """A face picture, and 4 s of audio: 1 s of silence, then a loud tone."""
    folder = tmp_path_factory.mktemp("disc")
    rate = 16000
    t = np.arange(3 * rate) / rate
    wave = np.concatenate([np.zeros(rate), 0.5 * np.sin(2 * np.pi * 220 * t)]).astype(np.float32)
    sf.write(folder / "a.wav", wave, rate)
    return write_face_png(folder / "face.png"), folder / "a.wav"


def _render(env: dict[str, str], inputs: tuple[Path, Path], out: Path, *extra: str, wait: bool = True):
    face, audio = inputs
    cmd = [sys.executable, "-m", "avatargen", "render", "-i", str(face), "-a", str(audio), "-o", str(out), "-q",
           "model=disc", *extra]  # fmt: skip
    process = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if not wait:
        return process
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    return stdout


def _disc_area(frames: np.ndarray) -> np.ndarray:
    """Share of each frame's pixels that are the (white) disc."""
    return (frames.min(axis=3) > 200).mean(axis=(1, 2))


def test_the_family_renders_overlapped_with_a_live_output(family_env, inputs, tmp_path) -> None:
    out, playlist = tmp_path / "disc.mp4", tmp_path / "live" / "disc.m3u8"
    report = json.loads(_render(family_env, inputs, out, "--json", "--publish", str(playlist),
                                "runtime.overlap=true", "runtime.threads=2"))  # fmt: skip
    assert report["overlap"] is True and report["frames"] == 4 * FPS and report["i_chunks"] > 0
    assert probe(out)["frames"] == 4 * FPS
    assert "#EXT-X-ENDLIST" in playlist.read_text() and list(playlist.parent.glob("*.ts"))
    area = _disc_area(decode_frames(out))
    assert area[:20].max() == 0 and area[30:].min() > 0.3  # silent, then loud (the seam at 24 blends them)


def test_the_family_resumes_exactly_after_sigint(family_env, inputs, tmp_path) -> None:
    reference, out = tmp_path / "reference.mp4", tmp_path / "out.mp4"
    _render(family_env, inputs, reference)
    slow = "model.chunk_seconds=0.15"  # 13 N chunks: ~2 s, stopped after its first resume point
    process = _render(family_env, inputs, out, slow, wait=False)
    deadline = time.monotonic() + 60
    while not list(out.with_name("out.resume").glob("state-*.safetensors")):
        assert process.poll() is None and time.monotonic() < deadline, "the render ended before it could be stopped"
        time.sleep(0.02)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130 and "--resume" in stderr, stderr
    _render(family_env, inputs, out, slow, "--resume")
    assert np.array_equal(decode_frames(out), decode_frames(reference))
