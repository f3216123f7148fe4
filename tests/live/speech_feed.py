"""Live speech for a render's stdin and the mouth in what a viewer decodes: what tests/live and
benchmarks/live measure latency with (shared, so the browser's figures and stdout's are taken the same way)."""

from __future__ import annotations

import struct
import sys
import threading
import time
from pathlib import Path

import numpy as np
import soundfile as sf

REPO = Path(__file__).resolve().parents[2]
RATE = 16000
PIECE = RATE // 50  # 20 ms
BURST_S = 1.5


def speech_bursts() -> list[np.ndarray]:
    """1.5-s pieces of the example speech, none overlapping, each starting at a word's onset (the first 20 ms above
    -30 dBFS after 100 ms below -45)."""
    bursts = []
    for n in (1, 2, 3):
        wave, rate = sf.read(REPO / "examples" / f"speech_{n}.flac", dtype="float32")
        wave = wave if wave.ndim == 1 else wave.mean(axis=1)
        assert rate == RATE
        levels = np.sqrt(np.mean(wave[: len(wave) // PIECE * PIECE].reshape(-1, PIECE) ** 2, axis=1))
        onsets = [i for i in range(5, len(levels)) if levels[i] > 10 ** (-30 / 20) and levels[i - 5 : i].max() < 10 ** (-45 / 20)]
        after = 0  # pieces do not overlap: each burst is found in the stream by its own sound
        for i in onsets:
            piece = wave[i * PIECE : i * PIECE + int(BURST_S * RATE)]
            if i >= after and len(piece) == int(BURST_S * RATE):
                bursts.append(piece)
                after = i + int(BURST_S * RATE) // PIECE
    return bursts


def session_audio(seconds: float, first: float, period: float) -> tuple[np.ndarray, list[float], list[np.ndarray]]:
    """(samples int16, burst start times in seconds, the bursts int16): room noise at -60 dBFS, a speech burst every
    ``period`` s."""
    rng = np.random.default_rng(0)
    audio = rng.normal(0, 10 ** (-60 / 20), int(seconds * RATE)).astype(np.float32)
    bursts, starts, used = speech_bursts(), [], []
    t = first
    while t + BURST_S <= seconds:
        piece = bursts[len(starts) % len(bursts)]
        a = int(t * RATE)
        audio[a : a + len(piece)] += piece
        starts.append(t)
        used.append((np.clip(piece, -1, 1) * 32767).astype("<i2"))
        t += period
    return (np.clip(audio, -1, 1) * 32767).astype("<i2"), starts, used


def wav_header() -> bytes:
    """A streaming WAV header (its lengths unknown: 0xFFFFFFFF), 16-bit mono."""
    fmt = struct.pack("<HHIIHH", 1, 1, RATE, RATE * 2, 2, 16)
    return b"RIFF" + struct.pack("<I", 0xFFFFFFFF) + b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt + b"data" + struct.pack("<I", 0xFFFFFFFF)


def mouth_box(image: Path) -> tuple[int, int, int, int]:
    """(y0, y1, x0, x1) of the mouth region in the output frame (the picture's own size), from the reference."""
    from avatargen.eval.face_track import _mouth_box_in_frame
    from avatargen.face.detector import shared_detector
    from avatargen.io.image import read_picture

    rgb = read_picture(image)
    face = shared_detector().find(rgb)
    if face is None:
        sys.exit(f"no face found in {image}")
    x0, y0, x1, y1 = _mouth_box_in_frame(face)
    return int(y0), int(y1), int(x0), int(x1)


def mouth_motion(crops: np.ndarray) -> np.ndarray:
    """Per frame, whether the mouth moved: its region differs from the resting mouth (the session's median region:
    the mouth rests most of the time) by more than 30 % of the way from the median difference to the 95th
    percentile."""
    stack = crops.astype(np.float32)
    moved = np.abs(stack - np.median(stack, axis=0)).mean(axis=(-2, -1))  # (T,)
    low, high = np.median(moved), np.percentile(moved, 95)
    return moved > low + 0.3 * (high - low)


class LiveMicrophone:
    """Writes a WAV stream into ``stdin`` at real time from a thread, as a microphone would: room noise at -60 dBFS,
    and a speech burst (``speech_bursts``) when ``speak()`` is called. ``spoken`` holds when each burst's first
    20-ms piece was written (``time.time()``). ``close()`` ends the stream (the render then finishes)."""

    def __init__(self, stdin) -> None:
        self.stdin = stdin
        self.spoken: list[float] = []
        self._bursts = [(np.clip(b, -1, 1) * 32767).astype(np.float32) for b in speech_bursts()]
        self._pending: list[np.ndarray] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="microphone", daemon=True)
        self._thread.start()

    def speak(self) -> None:
        """The next burst (1.5 s) starts with the next piece written."""
        burst = self._bursts[len(self.spoken) % len(self._bursts)]
        with self._lock:
            self._pending = [burst[k : k + PIECE] for k in range(0, len(burst) - PIECE + 1, PIECE)]
            self.spoken.append(float("nan"))

    def close(self) -> None:
        self._closed.set()
        self._thread.join(5)

    def _run(self) -> None:
        rng = np.random.default_rng(0)
        try:
            self.stdin.write(wav_header())
            start, index = time.time(), 0
            while not self._closed.is_set():
                delay = start + index * PIECE / RATE - time.time()
                if delay > 0:
                    time.sleep(delay)
                piece = rng.normal(0, 32767 * 10 ** (-60 / 20), PIECE).astype(np.float32)
                with self._lock:
                    first = bool(self._pending) and np.isnan(self.spoken[-1])
                    if self._pending:
                        piece += self._pending.pop(0)
                self.stdin.write(np.clip(piece, -32768, 32767).astype("<i2").tobytes())
                self.stdin.flush()
                if first:
                    self.spoken[-1] = time.time()
                index += 1
            self.stdin.close()
        except (BrokenPipeError, ValueError):
            pass  # the render ended first
