"""A toy causal few-step denoiser (each step with its own KV ring, as LiveAvatar's) run through the timestep-forcing
pipeline: ``torchrun --nproc-per-node N -m tests.distributed.pipeline_toy`` checks that the blocks leaving the last
rank are, bit for bit, those of one process running every step; benchmarks/distributed/pipeline_parallel.py times it.

The toy is compute-bound on purpose (a width where a CPU's matmuls dominate the sends): per step, ``layers`` layers of
attention over that step's ring of the last ``ring`` blocks plus an MLP, on ``tokens`` tokens of ``dim``.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.distributed as dist
from torch import Tensor

from avatargen.runtime.pipeline_parallel import PipelineRanks, StepLayout, run_step_pipeline


class ToyCausalSteps:
    """``steps`` denoising steps of a causal block model with seeded weights shared by every step (a timestep
    embedding tells them apart) and one KV ring per step."""

    def __init__(self, steps: int, dim: int = 64, tokens: int = 16, layers: int = 2, ring: int = 3, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.dim, self.tokens, self.ring = dim, tokens, ring
        self.weights = [[torch.randn(dim, dim, generator=g) / dim**0.5 for _ in range(6)] for _ in range(layers)]
        self.time = torch.randn(steps, dim, generator=g)
        self.sigmas = torch.linspace(1.0, 0.0, steps + 1)
        # per step, per layer: keys and values of the last `ring` blocks, (ring * tokens, dim)
        self.caches = [[(torch.zeros(ring * tokens, dim), torch.zeros(ring * tokens, dim)) for _ in range(layers)]
                       for _ in range(steps)]  # fmt: skip

    def noise(self, block: int) -> Tensor:
        return torch.randn(self.tokens, self.dim, generator=torch.Generator().manual_seed(1000 + block))

    def step(self, s: int, block: int, x: Tensor) -> Tensor:
        h = x + self.time[s]  # (T, D)
        slot = slice((block % self.ring) * self.tokens, (block % self.ring + 1) * self.tokens)
        seen = min(block + 1, self.ring) * self.tokens  # ring slots written so far (all once it has rolled)
        for (wq, wk, wv, wo, w1, w2), (k_ring, v_ring) in zip(self.weights, self.caches[s]):
            q = h @ wq
            k_ring[slot], v_ring[slot] = h @ wk, h @ wv  # this block's keys, for the later blocks of step s
            attention = torch.softmax(q @ k_ring[:seen].T / self.dim**0.5, dim=-1) @ v_ring[:seen]  # (T, D)
            h = h + attention @ wo
            h = h + torch.tanh(h @ w1) @ w2
        return x + (self.sigmas[s + 1] - self.sigmas[s]) * h  # an Euler step of the flow


def single_process(blocks: int, steps: int, **toy: int) -> list[Tensor]:
    model, out = ToyCausalSteps(steps, **toy), []
    run_step_pipeline(StepLayout(steps, 1), PipelineRanks.alone(), (model.noise(b) for b in range(blocks)), model.step,
                      lambda b, x: out.append(x), (model.tokens, model.dim))  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=7)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--compare", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    toy = {"dim": args.dim, "tokens": args.tokens, "layers": args.layers}
    model, ranks = ToyCausalSteps(args.steps, **toy), PipelineRanks.of_world()
    emitted: list[tuple[int, Tensor, float]] = []
    dist.barrier()
    started = time.perf_counter()
    run_step_pipeline(StepLayout(args.steps, ranks.stages), ranks, (model.noise(b) for b in range(args.blocks)),
                      model.step, lambda b, x: emitted.append((b, x, time.perf_counter() - started)),
                      (model.tokens, model.dim))  # fmt: skip
    if ranks.next is None:  # the last stage reports
        report = {"ranks": ranks.stages, "blocks": [b for b, _, _ in emitted], "emitted_s": [round(t, 4) for _, _, t in emitted]}
        if args.compare:
            alone = single_process(args.blocks, args.steps, **toy)
            report["equal"] = len(alone) == len(emitted) and all(torch.equal(a, x) for a, (_, x, _) in zip(alone, emitted))
        print(json.dumps(report), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
