"""The inputs every family's context stage reads: the reference picture as a tensor, and the audio of a window."""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch
from torch import Tensor


class AudioSamples(Protocol):
    """The audio a stage reads: mono samples of frames [start, end) (the pipeline's ``AudioTimeline``)."""

    def samples(self, start_frame: int, end_frame: int) -> np.ndarray: ...


def image_to_tensor(rgb: np.ndarray, device: torch.device) -> Tensor:
    """uint8 (H, W, 3) -> float (1, 3, H, W) in [-1, 1]."""
    x = torch.from_numpy(np.array(rgb, dtype=np.uint8, copy=True)).to(device)
    return x.permute(2, 0, 1).unsqueeze(0).float().div(127.5).sub(1.0)
