"""What an A2V DiT of another width, depth or head count would cost: one forward of the default schedule's two
window sizes (an N chunk with 2 motion frames: 18 frames; an I chunk: 12 frames), random weights, on one thread.

The sum is the A2V cost per 16 timeline frames and Euler step. Head size matters on a CPU: PyTorch's flash
attention kernel runs 64-wide heads faster than 48-wide ones for the same FLOPs.

    python benchmarks/speed/a2v_sizes.py [--repeats 8] [--sizes 192x4x4,128x4x2,...]   (dim x depth x heads)
"""

from __future__ import annotations

import argparse
import time

import torch

from avatargen.families.tiny.models.a2v_dit import A2VDiT, A2VDiTParams

DEFAULT_SIZES = "192x4x4,192x4x3,160x4x2,144x4x3,128x4x4,128x4x2,128x3x2"


def window(frames: int) -> tuple[torch.Tensor, ...]:
    """The inputs of one forward over a window of ``frames`` frames (values do not matter for timing)."""
    g = torch.Generator().manual_seed(frames)
    latents = (1, 8, frames, 16, 16)
    return (torch.randn(latents, generator=g), torch.full((1,), 0.5), torch.randn(latents, generator=g),
            torch.zeros(1, frames, dtype=torch.bool), torch.randn(1, 8, 16, 16, generator=g),
            torch.randn(1, frames, 128, generator=g), torch.randn(1, 128, generator=g))  # fmt: skip


def forward_ms(model: A2VDiT, inputs: tuple[torch.Tensor, ...], repeats: int) -> float:
    for _ in range(2):
        model(*inputs)
    start = time.perf_counter()
    for _ in range(repeats):
        model(*inputs)
    return (time.perf_counter() - start) / repeats * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--sizes", default=DEFAULT_SIZES)
    args = parser.parse_args()
    torch.set_num_threads(1)
    windows = {"N (18 frames)": window(18), "I (12 frames)": window(12)}
    print("dim x depth x heads | parameters | " + " | ".join(windows) + " | per 16 frames")
    with torch.inference_mode():
        for size in args.sizes.split(","):
            dim, depth, heads = (int(v) for v in size.split("x"))
            model = A2VDiT(A2VDiTParams(dim=dim, depth=depth, heads=heads)).eval()
            params = sum(p.numel() for p in model.parameters())
            times = [forward_ms(model, inputs, args.repeats) for inputs in windows.values()]
            cells = " | ".join(f"{t:.1f} ms" for t in times)
            print(f"{dim} x {depth} x {heads} | {params / 1e6:.2f} M | {cells} | {sum(times):.1f} ms", flush=True)


if __name__ == "__main__":
    main()
