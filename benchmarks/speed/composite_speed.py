"""Cost of reference compositing per frame (``ReferenceCompositor.compose``), at a few picture sizes.

Random pictures with the crop square a third of the short side around the centre (a half-body portrait's face);
batches of 4 model frames (the decoder's micro-batch), the median of ``--repeats`` batches. Prints ms per frame.

    python benchmarks/speed/composite_speed.py [--threads 2] [--repeats 20]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import cv2

from avatargen.compose.composite import ReferenceCompositor

SIZES = ((256, 256), (512, 512), (720, 1280), (1280, 1280), (2160, 3840))  # (H, W); the last is scaled to 1280


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    cv2.setNumThreads(args.threads)  # the compositing's resampling (avatargen/compose/)
    rng = np.random.default_rng(0)
    generated = rng.integers(0, 256, (4, 256, 256, 3), dtype=np.uint8)
    print(f"| picture | output | compose ms/frame (threads={args.threads}) |\n|---|---|---|")
    for height, width in SIZES:
        picture = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        side = min(height, width) // 3 if height > 256 else 256
        square = ((width - side) // 2, (height - side) // 2, side)
        started = time.perf_counter()
        compositor = ReferenceCompositor(picture, square, 256)
        build_ms = (time.perf_counter() - started) * 1000
        times = []
        for index in range(args.repeats):
            started = time.perf_counter()
            compositor.compose(generated, 4 * index)
            times.append((time.perf_counter() - started) * 1000 / len(generated))
        out_h, out_w = compositor.size
        print(f"| {width}x{height} | {out_w}x{out_h} | {np.median(times):.2f} (built once in {build_ms:.0f} ms) |")


if __name__ == "__main__":
    main()
