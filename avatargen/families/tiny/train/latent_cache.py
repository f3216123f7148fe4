"""Talking clips encoded once by the trained VAE and audio encoder: what the A2V and SR phases train on.

A clip is kept as latents at both resolutions plus per-frame audio features and mouth boxes in latent cells, so the
DiT phases never touch pixels or audio again (a 6 s clip is ~6 MB here instead of ~37 MB of frames).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from avatargen.data.examples import make_clip
from avatargen.families.tiny.models.audio_encoder import AudioEncoder
from avatargen.families.tiny.models.vae import VAE


HIGH_EVERY = 4  # SR trains on single frames: every 4th frame is plenty and saves 3/4 of the full-res encodes


@dataclass
class EncodedClip:
    """One clip in latent space. T frames; boxes are (x0, y0, x1, y1) in low-res latent cells."""

    low: Tensor  # (T, C, h, w)
    high: Tensor  # (ceil(T / HIGH_EVERY), C, H, W): frames 0, HIGH_EVERY, 2 HIGH_EVERY, ... (for SR pairs)
    ref_low: Tensor  # (C, h, w)
    ref_high: Tensor  # (C, H, W)
    audio: Tensor  # (T, D_audio)
    mouth_low: Tensor  # (T, 4) int, low-res latent cells
    prompt: str


def images_to_tensor(frames: np.ndarray) -> Tensor:
    """uint8 (N, H, W, 3) -> float (N, 3, H, W) in [-1, 1]."""
    return torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2).float().div(127.5).sub(1.0)


@torch.no_grad()
def encode_images(vae: VAE, images: Tensor, batch: int = 32) -> tuple[Tensor, Tensor]:
    """Images (N, 3, S, S) -> (low (N, C, S/16, S/16), high (N, C, S/8, S/8)) normalised latents."""
    highs, lows = [], []
    for part in images.split(batch):
        highs.append(vae.encode(part))
        lows.append(vae.encode(F.interpolate(part, scale_factor=0.5, mode="area")))
    return torch.cat(lows), torch.cat(highs)


@torch.no_grad()
def encode_clip(vae: VAE, audio_encoder: AudioEncoder, identity_seed: int, clip_seed: int, seconds: float,
                size: int, fps: int, sample_rate: int) -> EncodedClip:
    clip = make_clip(identity_seed, clip_seed, seconds, size=size, fps=fps, sample_rate=sample_rate)
    frames = clip.frames.shape[0]
    images = images_to_tensor(clip.frames)  # (T, 3, S, S)
    low = torch.cat([vae.encode(F.interpolate(part, scale_factor=0.5, mode="area")) for part in images.split(32)])
    high = torch.cat([vae.encode(part) for part in images[::HIGH_EVERY].split(32)])  # (T / 4, C, H, W)
    ref_low, ref_high = encode_images(vae, images_to_tensor(clip.reference[None]))
    spf = sample_rate // fps
    wave = np.zeros(frames * spf, dtype=np.float32)
    wave[: min(wave.size, clip.audio.size)] = clip.audio[: wave.size]
    features = audio_encoder(torch.from_numpy(wave)[None])[0]  # (T, D)
    cell = size // low.shape[-1]
    boxes = torch.from_numpy(np.asarray(clip.mouth_boxes)).long()  # (T, 4) pixels
    mouth_low = torch.stack([boxes[:, 0] // cell, boxes[:, 1] // cell, (boxes[:, 2] + cell - 1) // cell,
                             (boxes[:, 3] + cell - 1) // cell], dim=1)  # fmt: skip
    return EncodedClip(low, high, ref_low[0], ref_high[0], features, mouth_low, clip.prompt)


def build_cache(vae: VAE, audio_encoder: AudioEncoder, count: int, seconds: float, size: int, fps: int,
                sample_rate: int, seed: int, identities: int, log: Callable[[str], None]) -> list[EncodedClip]:
    """``count`` clips of distinct training identities, encoded."""
    rng = np.random.default_rng(seed + 17)
    seeds = rng.choice(identities, size=count, replace=False)
    cache = []
    for i, identity in enumerate(seeds):
        cache.append(encode_clip(vae, audio_encoder, int(identity), seed * 100_003 + i, seconds, size, fps, sample_rate))
        if (i + 1) % 20 == 0:
            log(f"latent cache: {i + 1}/{count} clips")
    return cache


def mouth_weight(boxes: Tensor, size: int, weight: float, scale: int = 1) -> Tensor:
    """Loss weights (N, 1, size, size): 1 everywhere, ``1 + weight`` inside each (scaled) mouth box."""
    ys = torch.arange(size)[None, :, None]
    xs = torch.arange(size)[None, None, :]
    b = boxes * scale
    inside = (xs >= b[:, 0, None, None]) & (xs < b[:, 2, None, None]) & (ys >= b[:, 1, None, None]) & (ys < b[:, 3, None, None])
    return (1.0 + weight * inside.float())[:, None]
