"""A frame sink that drops every frame: what the non-primary ranks of a sharded render publish into."""

from __future__ import annotations

import numpy as np


class NullSink:
    """Counts frames and keeps none (ranks other than 0 compute the same frames but never touch the output)."""

    def __init__(self) -> None:
        self.frames = 0

    def write(self, frames: np.ndarray) -> None:
        self.frames += len(frames)
