"""The encoder's place in a render whose only outputs are sinks (a ``webrtc://`` target alone, an agent's frames):
it encodes nothing and writes no file, and counts what went by."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import numpy as np


class NoEncoder:
    """What ``RenderOutputs`` asks of an ``Encoder`` (avatargen/io/encoder.py), with nothing behind it."""

    def __init__(self) -> None:
        self.frames_written = 0
        self.first_frame_time: float | None = None
        self.dropped: dict[str, str] = {}

    def write(self, frames: np.ndarray) -> None:
        if self.first_frame_time is None:
            self.first_frame_time = time.perf_counter()
        self.frames_written += len(frames) if frames.ndim == 4 else 1

    def write_audio(self, pcm: bytes) -> None:
        pass

    def hurry(self) -> None:
        """Nothing waits on an encoder here."""

    def close(self, before_publish: Callable[[], None] | None = None) -> Path | None:
        return None

    def close_partial(self, trim: bool = True) -> Path | None:
        return None

    def abort(self, trim: bool = False) -> Path | None:
        return None
