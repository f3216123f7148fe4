"""Decode-and-publish: the streaming VAE decoder turns latents into RGB frames that go straight to the sinks."""

from __future__ import annotations

from typing import Callable, Iterator, Sequence

import numpy as np
import torch
from einops import rearrange
from torch import Tensor

from avatargen.io.sink import FrameSink
from avatargen.models.vae import DecoderCache
from avatargen.modules import Module


class DecodeAndPublishStage:
    """Decodes latents chunk by chunk with a bounded causal cache and hands the frames to every sink."""

    def __init__(self, vae: Module, sinks: Sequence[FrameSink], micro_batch_frames: int = 4):
        self.vae = vae
        # Decoding a fixed number of frames at a time keeps the full-resolution activations (the largest tensors of
        # the render) the same size whatever the segment length, so peak memory does not depend on the schedule.
        self.micro_batch_frames = micro_batch_frames
        self.sinks = list(sinks)
        self.cache: DecoderCache | None = None  # bounded: the last few latent frames of each causal conv

    @torch.inference_mode()
    def decode(self, latents: Tensor, check: Callable[[Tensor], None] | None = None) -> Iterator[np.ndarray]:
        """(1, C, T, H, W) latents -> uint8 frames (t, 8H, 8W, 3), a micro-batch at a time; advances the cache.

        ``check`` sees each decoded float video (1, 3, t, 8H, 8W) before it is quantised (e.g. a NaN check).
        """
        with self.vae.active() as vae:
            if self.cache is None:
                self.cache = vae.still_cache(latents)  # the past the decoder is trained with, not zeros
            for part in latents.split(self.micro_batch_frames, dim=2):
                video, self.cache = vae.decode(part, self.cache)  # (1, 3, t, 8H, 8W) in [-1, 1]
                video = video.float()  # quantised from float32 whatever the compute dtype
                if check is not None:
                    check(video)
                video = rearrange(video, "1 c t h w -> t h w c")
                yield video.add(1.0).mul(127.5).round().clamp(0, 255).to(torch.uint8).cpu().numpy()

    def publish(self, frames: np.ndarray) -> None:
        for sink in self.sinks:
            sink.write(frames)
