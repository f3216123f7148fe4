"""SR: one step from low-resolution to high-resolution latents, frame by frame, reference-aware."""

from __future__ import annotations

import torch
from einops import rearrange
from torch import Tensor

from avatargen.modules import Module
from avatargen.families.tiny.stages.context import ReferenceContext


class SRStage:
    """Upscales the latents of frames about to leave the pipeline."""

    def __init__(self, sr: Module, max_batch_frames: int = 16):
        self.sr = sr
        self.max_batch_frames = max_batch_frames

    @torch.inference_mode()
    def upscale(self, reference: ReferenceContext, low: Tensor) -> Tensor:
        """(1, C, T, h, w) -> (1, C, T, H, W)."""
        frames = rearrange(low, "1 c t h w -> t c h w")
        outputs = []
        with self.sr.active() as sr:
            for batch in frames.split(self.max_batch_frames):
                ref = reference.ref_high.expand(batch.shape[0], -1, -1, -1)  # (B, C, H, W)
                outputs.append(sr(batch, ref).float())  # (B, C, H, W), float32 whatever the compute dtype
        return rearrange(torch.cat(outputs), "t c h w -> 1 c t h w")
