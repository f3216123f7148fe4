"""What boundary-frame conditioning costs in A2V time: the A2V windows of one seam step with and without motion frames.

With ``pipeline.motion_frames=M`` each N chunk's A2V window is ``n_chunk_frames + M`` frames (the M given frames are
tokens like the others); the I chunk's window does not change. This times ``A2VStage.generate`` of the shipped model
on the windows of one step of the default schedule (one N chunk + one I chunk), the configurations interleaved,
``--repeats`` times each, in one process, and prints the median per step and the ratio against M=0.

    python benchmarks/speed/motion_frames_cost.py [--motion 0,2,4] [--repeats 15] [override ...]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from avatargen.config.loader import load_config, to_config
from avatargen.io.image import load_reference_image
from avatargen.families.tiny.build import build_modules
from avatargen.pipeline.family import engine_for
from avatargen.pipeline.build import pipeline_for

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def window_inputs(config, frames: int, given: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
    """Audio features, given latents, given mask and noise for an A2V window of ``frames`` frames (timing only)."""
    a2v = config.model.a2v
    g = torch.Generator().manual_seed(frames)
    shape = (1, a2v.latent_channels, frames, a2v.latent_size, a2v.latent_size)
    features = torch.randn(1, frames, a2v.audio_dim, generator=g)  # (1, T, D_audio)
    mask = torch.zeros(1, frames, dtype=torch.bool)
    mask[0, list(given)] = True
    return features, torch.randn(shape, generator=g), mask, torch.randn(shape, generator=g)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--motion", default="0,2,4", help="motion_frames values to compare (the first is the base)")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("overrides", nargs="*", default=["runtime.threads=1"])
    args = parser.parse_args()
    config = to_config(load_config(args.overrides))
    torch.set_num_threads(config.runtime.threads or torch.get_num_threads())
    pipeline = pipeline_for(config, build_modules(config, torch.device("cpu")), engine_for(config))
    reference = pipeline.steps.context.encode_reference(
        load_reference_image(EXAMPLES / "avatar_1.png", config.model.image_size), ""
    )
    p = config.pipeline
    i_frames = p.seam_frames + 2 * p.anchor_frames
    i_given = tuple(range(p.anchor_frames)) + tuple(range(i_frames - p.anchor_frames, i_frames))
    motions = [int(m) for m in args.motion.split(",")]
    steps = {m: [window_inputs(config, p.n_chunk_frames + m, tuple(range(m))), window_inputs(config, i_frames, i_given)]
             for m in motions}  # fmt: skip
    times: dict[int, list[float]] = {m: [] for m in motions}
    for repeat in range(args.repeats + 1):  # the first round warms up and is not counted
        for m in motions:
            start = time.perf_counter()
            for features, given, mask, noise in steps[m]:
                pipeline.steps.a2v.generate(reference, features, given, mask, noise, p.sampling_steps)
            if repeat:
                times[m].append(time.perf_counter() - start)
    base = statistics.median(times[motions[0]])
    print(f"A2V per seam step (N window {p.n_chunk_frames}+M frames, I window {i_frames}), "
          f"{p.sampling_steps} Euler steps, threads={torch.get_num_threads()}, median of {args.repeats}:")
    for m in motions:
        med = statistics.median(times[m])
        print(f"  motion_frames={m}: {med * 1000:.1f} ms ({med / base:.3f}x), spread "
              f"{min(times[m]) * 1000:.1f}-{max(times[m]) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
