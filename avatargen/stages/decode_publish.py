"""Decode-and-publish: the streaming VAE decoder turns latents into RGB frames that go straight to the sinks."""

from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np
import torch
from einops import rearrange
from torch import Tensor

from avatargen.models.vae import DecoderCache
from avatargen.modules import Module


class FrameSink(Protocol):
    """Anything that takes uint8 RGB frames (T, H, W, 3) in timeline order (an MP4 writer, a live publisher...)."""

    def write(self, frames: np.ndarray) -> None: ...


class DecodeAndPublishStage:
    """Decodes latents chunk by chunk with a bounded causal cache and hands the frames to every sink."""

    def __init__(self, vae: Module, sinks: Sequence[FrameSink]):
        self.vae = vae
        self.sinks = list(sinks)
        self.cache: DecoderCache | None = None  # bounded: the last few latent frames of each causal conv

    @torch.inference_mode()
    def decode(self, latents: Tensor) -> np.ndarray:
        """(1, C, T, H, W) latents -> uint8 frames (T, 8H, 8W, 3); advances the causal cache."""
        with self.vae.active() as vae:
            video, self.cache = vae.decode(latents, self.cache)  # (1, 3, T, 8H, 8W) in [-1, 1]
        video = rearrange(video, "1 c t h w -> t h w c")
        return video.add(1.0).mul(127.5).round().clamp(0, 255).to(torch.uint8).cpu().numpy()

    def publish(self, frames: np.ndarray) -> None:
        for sink in self.sinks:
            sink.write(frames)
