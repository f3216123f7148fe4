"""Cost of the VAE decoder per frame: the causal convs as one Conv3d (the layer's weights) vs as 2D convs per time
tap (how it runs), the whole frame vs only the region reference compositing reads, and that region with each level
above the latent grid computing only what the read box needs (how it runs).

The shipped decoder; latents are the shipped VAE's encoding of ``--frames`` frames of a moving face (the example
avatar, shifted a pixel per frame, so the causal convs see motion); decoded streamed in the renderer's micro-batches
(4 whole frames, or as many frames of the region as hold as many pixels) with the cache carried. Each variant runs
``--repeats`` times in this process, interleaved (so the machine's noise hits all alike); the median is printed in
ms per frame, with the ratio to the first row.

    python benchmarks/speed/decode_speed.py [--threads 2] [--frames 48] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import contextmanager

import numpy as np
import torch

from avatargen.compose.composite import ReferenceCompositor
from avatargen.io.image import load_reference
from avatargen.families.tiny.models.vae import VAE, CausalConv3d, VAEParams
from avatargen.modules import read_checkpoint
from avatargen.families.tiny.config import SHIPPED_CHECKPOINTS
from avatargen.families.tiny.stages.decode import DECODE_MARGIN, DecodeRegion

EXAMPLE = "examples/avatar_1.png"


@contextmanager
def as_conv3d():
    """The causal convs run as the Conv3d their weights come from (the layer before it ran as 2D taps)."""
    original = CausalConv3d._temporal_conv
    CausalConv3d._temporal_conv = lambda self, x: self.conv(x)
    try:
        yield
    finally:
        CausalConv3d._temporal_conv = original


def decode_ms_per_frame(vae: VAE, latents: torch.Tensor, region: DecodeRegion | None, cropped_levels: bool) -> float:
    """Streamed decode of (1, C, T, h, w) latents, 4 frames at a time; ms per frame."""
    frames, read = 4, None  # the renderer's micro-batch: 4 whole frames, or as many region frames as hold as many pixels
    if region is not None:
        latents, frames = region.crop(latents), region.frames_like(4)
        read = region.read_window() if cropped_levels else None
    started = time.perf_counter()
    with torch.inference_mode():
        cache = vae.still_cache(latents)
        for part in latents.split(frames, dim=2):
            video, cache = vae.decode(part, cache, read)
            video.add(1.0).mul(127.5).round().clamp(0, 255).to(torch.uint8)
    return (time.perf_counter() - started) * 1000 / latents.shape[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--frames", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    vae = VAE(VAEParams())
    vae.load_state_dict(read_checkpoint(SHIPPED_CHECKPOINTS["tiny"], "vae"))
    vae.eval()
    loaded = load_reference(EXAMPLE, 256, "face")
    frames = np.stack([np.roll(loaded.square, shift, axis=1) for shift in range(args.frames)])  # (T, S, S, 3)
    images = torch.from_numpy(frames).permute(0, 3, 1, 2).float() / 127.5 - 1  # (T, 3, S, S)
    with torch.inference_mode():
        latents = vae.encode(images).permute(1, 0, 2, 3)[None]  # (1, C, T, h, w)
    box = ReferenceCompositor(loaded.picture, loaded.crop, 256, loaded.face).model_box()
    region = DecodeRegion.around(box, vae.factor, latents.shape[-1])
    area = (region.bottom - region.top) * (region.right - region.left) / latents.shape[-1] ** 2
    mouth = f"mouth region ({area:.0%} of the grid, margin {DECODE_MARGIN}, {region.frames_like(4)} frames at a time), 2D taps"
    variants = {
        "whole frame, Conv3d": (True, None, False),
        "whole frame, 2D taps": (False, None, False),
        mouth: (False, region, False),
        "the same, upper levels only where the box reads (the default)": (False, region, True),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.repeats):
        for name, (conv3d, part, cropped) in variants.items():
            if conv3d:
                with as_conv3d():
                    times[name].append(decode_ms_per_frame(vae, latents, part, cropped))
            else:
                times[name].append(decode_ms_per_frame(vae, latents, part, cropped))
    first = statistics.median(next(iter(times.values())))
    print(f"| decoder (threads={args.threads}, {args.frames} frames) | ms/frame | vs first |\n|---|---|---|")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"| {name} | {median:.2f} | {median / first:.2f} |")


if __name__ == "__main__":
    main()
