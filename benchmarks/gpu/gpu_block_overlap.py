"""GPU check of block offload: is the GPU kept busy while blocks stream in, and is pinned memory the weights' size?

A plain stack of 30 transformer blocks at dim 1536 (avatargen's ``TransformerBlock``, bf16, ~57 MB a block), built on
the meta device, randomly initialised in place and placed with ``runtime.offload=block`` (resident_blocks=2) on CUDA.
After a warm-up forward, one forward is profiled: the **busy share** is the union of the compute kernels' intervals
over the span from the first kernel's start to the last one's end (copies excluded; target >= 95 %: block n+1's copy
and the host's bookkeeping hide behind block n's kernels). **Pinned bytes** are the page-locked flat host buffers
over the weights' bytes (target <= 1.05). Prints one JSON line; exit code 1 when a target is missed.

    python benchmarks/gpu/gpu_block_overlap.py [--tokens 8192] [--blocks 30]     # needs CUDA; ~1 minute on an H200
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from avatargen.families.tiny.models.layers import TransformerBlock  # noqa: E402
from avatargen.modules import Module, ModuleSpec, PlacementPlan  # noqa: E402


class BlockStack(nn.Module):
    """Only blocks: what block offload streams."""

    def __init__(self, blocks: int, dim: int, heads: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(TransformerBlock(dim, heads) for _ in range(blocks))

    def block_stacks(self) -> list[nn.ModuleList]:
        return [self.blocks]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)  # (B, L, D)
        return x


def busy_share(events: list) -> tuple[float, float]:
    """(union of compute-kernel time / span from first start to last end, span in ms) of profiler CUDA events."""
    spans = sorted((e.time_range.start, e.time_range.end) for e in events if "memcpy" not in e.name.lower() and "memset" not in e.name.lower())
    if not spans:
        return 0.0, 0.0
    busy, (start, end) = 0.0, spans[0]
    first, last = spans[0][0], max(e for _, e in spans)
    for s, e in spans[1:]:
        if s > end:
            busy += end - start
            start, end = s, e
        else:
            end = max(end, e)
    busy += end - start
    return busy / (last - first), (last - first) / 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--blocks", type=int, default=30)
    parser.add_argument("--dim", type=int, default=1536)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_block_overlap.py needs a CUDA device")
    cuda = torch.device("cuda")
    spec = ModuleSpec("stack", lambda: BlockStack(args.blocks, args.dim, args.dim // 128))
    module = Module.random(spec, 0, PlacementPlan("block", cuda, torch.bfloat16, resident_blocks=2))
    weights = sum(p.numel() * p.element_size() for p in module.model.parameters())
    x = torch.randn(1, args.tokens, args.dim, device=cuda, dtype=torch.bfloat16)
    with torch.inference_mode():
        with module.active() as model:
            model(x)  # warm-up: kernels chosen, allocator primed
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            with module.active() as model:
                model(x)
            torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    share, span_ms = busy_share(kernels)
    report = module.monitor.report()
    result = {
        "blocks": args.blocks, "dim": args.dim, "tokens": args.tokens, "weights_mb": round(weights / 2**20, 1),
        "busy_share": round(share, 4), "forward_span_ms": round(span_ms, 2), "target_busy_share": 0.95,
        "pinned_over_weights": round(module.monitor.pinned_bytes / weights, 4), "target_pinned": 1.05,
        "h2d_gbps": report["h2d_gbps"], "max_resident_blocks": report["max_resident_blocks"],
        "peak_device_mb": report["peak_device_mb"],
    }  # fmt: skip
    print(json.dumps(result))
    sys.exit(0 if share >= 0.95 and result["pinned_over_weights"] <= 1.05 else 1)


if __name__ == "__main__":
    main()
