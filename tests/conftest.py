"""Shared fixtures: small real inputs made on the fly, and a helper to run the real CLI."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from PIL import Image, ImageDraw

from tests import cli_fork

REPO = Path(__file__).resolve().parents[1]

def pytest_collection_finish(session) -> None:
    cli_fork.remember_session_environment()


@pytest.fixture(autouse=True)
def _environment_restored():
    """Each test leaves the process environment as it found it (a library that sets a variable on first use, a test
    that sets one for its servers): the CLI runs of later tests fork only from an unchanged environment."""
    saved = dict(os.environ)
    yield
    if dict(os.environ) != saved:
        os.environ.clear()
        os.environ.update(saved)


# Keep the test CLI runs small and single-threaded on the 2-core CI machine.
FAST = ["model.weights=random", "runtime.threads=1"]


class FrameList:
    """A frame sink that keeps a copy of every batch it is handed (a short in-process render)."""

    def __init__(self) -> None:
        self.parts: list[np.ndarray] = []

    def write(self, frames: np.ndarray) -> None:
        self.parts.append(frames.copy())

    def video(self) -> np.ndarray:
        """(T, H, W, 3) uint8: every frame, in order."""
        return np.concatenate(self.parts)


def write_speechlike_wav(path: Path, seconds: float, rate: int = 22050, channels: int = 1) -> Path:
    """A syllable-rate amplitude-modulated harmonic tone with pauses: speech-like energy, no speech."""
    t = np.arange(int(seconds * rate)) / rate
    envelope = np.clip(np.sin(2 * np.pi * 4.0 * t), 0, None) * (np.sin(2 * np.pi * 0.5 * t) > -0.3)
    voice = sum(np.sin(2 * np.pi * f * t) / k for k, f in enumerate((140, 280, 420, 560), start=1))
    wave = (0.3 * envelope * voice).astype(np.float32)
    data = np.stack([wave] * channels, axis=1) if channels > 1 else wave
    sf.write(path, data, rate)
    return path


def write_face_png(path: Path, size: int = 300) -> Path:
    image = Image.new("RGB", (size, size), (70, 110, 160))
    draw = ImageDraw.Draw(image)
    s = size
    draw.ellipse((0.25 * s, 0.15 * s, 0.75 * s, 0.85 * s), fill=(225, 180, 150))
    draw.ellipse((0.36 * s, 0.38 * s, 0.44 * s, 0.45 * s), fill=(40, 40, 60))
    draw.ellipse((0.56 * s, 0.38 * s, 0.64 * s, 0.45 * s), fill=(40, 40, 60))
    draw.rectangle((0.42 * s, 0.66 * s, 0.58 * s, 0.70 * s), fill=(150, 50, 60))
    image.save(path)
    return path


@pytest.fixture
def face_png(tmp_path: Path) -> Path:
    return write_face_png(tmp_path / "face.png")


@pytest.fixture
def speech_wav(tmp_path: Path) -> Path:
    return write_speechlike_wav(tmp_path / "speech.wav", 3.0)


def descendants(pid: int) -> list[int]:
    """Process ids of every live descendant of ``pid`` (read from /proc; children before grandchildren)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, queue = [], [pid]
    while queue:
        for child in parents.get(queue.pop(0), []):
            found.append(child)
            queue.append(child)
    return found


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and every descendant at once (the encoder included: ffmpeg runs in its own process group), as a
    power cut would; processes already gone are skipped."""
    for target in [pid, *descendants(pid)]:
        try:
            os.kill(target, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_cli(*args: str, timeout: float = 300, env_extra: dict[str, str] | None = None, **kwargs) -> subprocess.CompletedProcess:
    """Run ``python -m avatargen ARGS`` as a user would (``env``: the whole environment instead of this one's;
    ``env_extra`` added to it); returns the completed process (text mode). The process is a fork of one that has
    imported torch and the CLI (tests/cli_fork.py) wherever that cannot change what it does; ``AVATARGEN_TEST_FRESH=1``
    starts a fresh interpreter for every run."""
    env = {**(kwargs.pop("env", None) or {**os.environ, "PYTHONPATH": str(REPO)}), **(env_extra or {})}
    kwargs.setdefault("text", True)
    if os.environ.get("AVATARGEN_TEST_FRESH") != "1" and cli_fork.forkable(env, kwargs):
        return cli_fork.run(list(args), env, timeout=timeout, **kwargs)
    return subprocess.run([sys.executable, "-m", "avatargen", *args], capture_output=True, timeout=timeout, env=env, **kwargs)


def engine_of(config):
    """The engine of ``config``'s model family, as a render resolves it (avatargen/pipeline/family.py)."""
    from avatargen.pipeline.family import engine_for

    return engine_for(config)
