"""What the pipeline hands its frames to: an MP4 encoder, a live publisher, a pacer, a null sink."""

from __future__ import annotations

from typing import Protocol

import numpy as np


class FrameSink(Protocol):
    """Anything that takes uint8 RGB frames (T, H, W, 3) in timeline order (an MP4 writer, a live publisher...)."""

    def write(self, frames: np.ndarray) -> None: ...
