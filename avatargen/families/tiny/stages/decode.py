"""Decode: the streaming VAE decoder turns latents into RGB frames, chunk by chunk, that the engine hands straight to
the sinks (the publish half of the decode-and-publish stage, avatargen/pipeline/pipeline.py).

When the sinks read only part of each frame (reference compositing reads the mouth and jaw), ``DecodeRegion`` lets
the decoder run on that part of the latent grid alone, with a margin of latent pixels around it so that the
pixels the sinks read come out as a whole-frame decode would give them (the decoder is convolutional: a crop's
border only reaches a few latent pixels in; docs/performance.md, "Decoder"). Above the latent grid each level
computes only the pixels the read box depends on (exactly: ``VAE.decode``'s ``read``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
import torch
from einops import rearrange
from torch import Tensor

from avatargen.errors import ResumeMismatchError
from avatargen.families.tiny.models.vae import DecoderCache
from avatargen.modules import Module

# Latent pixels decoded around the pixels read. The tiny model's decoder at 3: the read pixels differ from a whole
# decode by at most 1.3 grey levels before rounding (0.3 at 4, 0.09 at 5, none at 8, its receptive field); over 4 s
# of speech, 2 levels at most after rounding, 0.04-0.07 mean, and the composited frames as close to a whole decode's
# as at 4 (0.0003-0.002 levels mean), for 0.87x the decoder's work under AVX2 (docs/performance.md, "Decoder").
DECODE_MARGIN = 3


@dataclass(frozen=True)
class DecodeRegion:
    """The part of the (latent_size, latent_size) latent grid decoded: rows ``top:bottom``, columns ``left:right``;
    ``factor`` pixels per latent pixel. ``box`` (y0, y1, x0, x1), model-frame pixels, is what the sinks read (None:
    every pixel of the region): the decoder's upper levels compute only what those pixels need. Decoded frames are
    the full (S, S) size with only the box's pixels filled (the rest zero)."""

    top: int
    bottom: int
    left: int
    right: int
    factor: int
    latent_size: int
    box: tuple[int, int, int, int] | None = None

    @staticmethod
    def around(box: tuple[int, int, int, int], factor: int, latent_size: int, margin: int = DECODE_MARGIN) -> "DecodeRegion":
        """The region that decodes the pixels ``box`` = (y0, y1, x0, x1) (model-frame pixels, end exclusive)."""
        y0, y1, x0, x1 = box
        return DecodeRegion(
            top=max(0, y0 // factor - margin),
            bottom=min(latent_size, -(-y1 // factor) + margin),
            left=max(0, x0 // factor - margin),
            right=min(latent_size, -(-x1 // factor) + margin),
            factor=factor,
            latent_size=latent_size,
            box=(max(0, y0), min(latent_size * factor, y1), max(0, x0), min(latent_size * factor, x1)),
        )

    @property
    def pixels(self) -> tuple[int, int, int, int]:
        """(y0, y1, x0, x1), model-frame pixels: what a decode of this region returns."""
        if self.box is not None:
            return self.box
        f = self.factor
        return self.top * f, self.bottom * f, self.left * f, self.right * f

    def read_window(self) -> tuple[int, int, int, int]:
        """``pixels`` on the region's own grid (its first decoded pixel at (0, 0))."""
        y0, y1, x0, x1 = self.pixels
        top, left = self.top * self.factor, self.left * self.factor
        return y0 - top, y1 - top, x0 - left, x1 - left

    def frames_like(self, whole_frames: int) -> int:
        """How many frames of this region hold as many latent pixels as ``whole_frames`` whole frames (at most 4x)."""
        area = (self.bottom - self.top) * (self.right - self.left)
        return max(1, min(4 * whole_frames, whole_frames * self.latent_size**2 // max(area, 1)))

    def crop(self, latents: Tensor) -> Tensor:
        """(..., h, w) -> (..., bottom - top, right - left)."""
        return latents[..., self.top : self.bottom, self.left : self.right]


class StreamingDecodeStage:
    """Decodes latents chunk by chunk with a bounded causal cache.

    ``region`` (None: the whole frame) is the part of the latent grid the sinks need decoded."""

    def __init__(self, vae: Module, micro_batch_frames: int = 4, region: DecodeRegion | None = None):
        self.vae = vae
        # Decoding a fixed number of pixels at a time keeps the full-resolution activations (the largest tensors of
        # the render) the same size whatever the segment length, so peak memory does not depend on the schedule:
        # ``micro_batch_frames`` whole frames, or as many frames of the region as hold as many pixels (the 2D convs
        # run faster on more frames at once: 4.2 against 5.1 ms a frame at 16 against 4 frames of the mouth region).
        self.micro_batch_frames = micro_batch_frames if region is None else region.frames_like(micro_batch_frames)
        self.region = region
        self.cache: DecoderCache | None = None  # bounded: the last few latent frames of each causal conv

    def resume_from(self, cache: DecoderCache | None, latent_size: int) -> None:
        """Continue a stopped render's decoder state; one saved with another region cannot be continued."""
        if cache is not None:
            expected = (latent_size, latent_size) if self.region is None else (
                self.region.bottom - self.region.top, self.region.right - self.region.left)
            if tuple(cache.frames[0].shape[-2:]) != expected:
                raise ResumeMismatchError(
                    "cannot resume: the stopped render decoded another part of the frame (an older avatargen "
                    "version); render without --resume to start over"
                )
        self.cache = cache

    @torch.inference_mode()
    def decode(self, latents: Tensor, check: Callable[[Tensor], None] | None = None) -> Iterator[np.ndarray]:
        """(1, C, T, h, w) latents -> uint8 frames (t, 8h, 8w, 3), a micro-batch at a time; advances the cache.

        ``check`` sees each decoded float video (1, 3, t, rows, cols) before it is quantised (e.g. a NaN check).
        """
        size = latents.shape[-2:]  # (h, w) latent pixels
        if self.region is not None:
            latents = self.region.crop(latents)  # (1, C, T, bottom - top, right - left)
        with self.vae.active() as vae:
            if self.cache is None:
                self.cache = vae.still_cache(latents)  # the past the decoder is trained with, not zeros
            read = None if self.region is None else self.region.read_window()
            for part in latents.split(self.micro_batch_frames, dim=2):
                video, self.cache = vae.decode(part, self.cache, read)  # (1, 3, t, rows, cols) in [-1, 1]
                video = video.float()  # quantised from float32 whatever the compute dtype
                if check is not None:
                    check(video)
                video = rearrange(video, "1 c t h w -> t h w c")
                pixels = video.add(1.0).mul(127.5).round().clamp(0, 255).to(torch.uint8).cpu().numpy()
                yield pixels if self.region is None else self._placed(pixels, size)

    def _placed(self, pixels: np.ndarray, latent_size: tuple[int, int]) -> np.ndarray:
        """(t, rows, cols, 3) decoded pixels -> (t, f*h, f*w, 3) frames holding them at their place (zero elsewhere)."""
        f = self.region.factor
        y0, y1, x0, x1 = self.region.pixels
        frames = np.zeros((pixels.shape[0], latent_size[0] * f, latent_size[1] * f, 3), dtype=np.uint8)
        frames[:, y0:y1, x0:x1] = pixels
        return frames
