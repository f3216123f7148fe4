"""LiveAvatar's block loop at toy size on this machine: per block, the DiT's 4 steps, the VAE decode and the
process's RSS, with the KV rings' bytes (constant once allocated: they roll).

    python benchmarks/speed/liveavatar_blocks.py [--blocks 12] [--threads 2] [--json out.json]

Compare blocks within one run (the machine's load moves absolute figures).
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from types import SimpleNamespace

import numpy as np
import torch

from avatargen.config.loader import load_config, to_config
from avatargen.families.liveavatar.chunks import LiveAvatarChunks
from avatargen.pipeline.family import engine_for
from avatargen.pipeline.build import place_models
from avatargen.pipeline.schedule import NChunk
from avatargen.pipeline.state import RollingState
from avatargen.pipeline.stats import RenderStats
from avatargen.runtime.distributed import ParallelContext, world_info


class Tone:
    """A 25 fps, 16 kHz amplitude-modulated tone (the engine's AudioTimeline interface)."""

    def samples(self, start: int, end: int) -> np.ndarray:
        t = np.arange(start * 640, end * 640) / 16000
        return (0.3 * np.sin(2 * np.pi * 220 * t) * (1 + np.sin(2 * np.pi * 3 * t)) * (t >= 0)).astype(np.float32)


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=12)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = to_config(load_config(["model=liveavatar_tiny"]))
    models = place_models(config, engine_for(config), torch.device("cpu"), ParallelContext(world_info()))
    chunks = LiveAvatarChunks(config, models)
    picture = (np.random.default_rng(0).random((64, 64, 3)) * 255).astype(np.uint8)
    started = time.perf_counter()
    run = chunks.start(picture, "a person talking", RenderStats(), None)
    print(f"start (sink forward, VAE encode of the reference and 73 motion frames): {time.perf_counter() - started:.2f} s")
    ring_mb = sum(t.numel() * t.element_size() for k, t in run.save()[0].items() if k.startswith("ring")) / 2**20
    print(f"KV rings: {len(run.rings)} x {run.rings[0].ring_tokens} tokens, {ring_mb:.3f} MiB in all")
    rows, state = [], RollingState()
    print("block  dit_s  decode_s  rss_mb")
    for b in range(args.blocks):
        t0 = time.perf_counter()
        run.n_chunk(NChunk(b, b * 12, b * 12 + 12, b * 12), Tone(), state)
        t1 = time.perf_counter()
        segment = run.hand_over(SimpleNamespace(index=b, start=b * 12, end=b * 12 + 12), state)
        for _ in run.frames(segment, None):
            pass
        t2 = time.perf_counter()
        rows.append({"block": b, "dit_s": round(t1 - t0, 3), "decode_s": round(t2 - t1, 3), "rss_mb": round(rss_mb(), 1)})
        print(f"{b:5d}  {t1 - t0:5.2f}  {t2 - t1:8.2f}  {rows[-1]['rss_mb']:6.1f}")
    later = rows[1:]
    print(f"median after block 0: DiT {np.median([r['dit_s'] for r in later]):.3f} s, "
          f"decode {np.median([r['decode_s'] for r in later]):.3f} s per 12 frames; "
          f"RSS {later[0]['rss_mb']:.1f} -> {later[-1]['rss_mb']:.1f} MB")  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ring_mb": ring_mb, "blocks": rows}, f, indent=1)


if __name__ == "__main__":
    main()
