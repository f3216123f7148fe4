"""Cost of idle motion (``avatargen/compose/idle_motion.py``) per composited frame at 256, 512 and 1024 pixels.

A held-out training-style avatar is drawn at 256x256, its face found once, and the frame and its layout scaled to
each size (the head fills the same share of the frame, as a portrait would). ``IdleMotion.warp`` is then timed on
``--frames`` consecutive frames with the default settings: frames without a blink (head sway only) and frames
inside a blink (sway and both eyelids) are reported apart, mean and 95th percentile, in milliseconds, one OpenCV
thread (what a render gives its compositing). ``--long-lashes``: a photograph's lids instead, on
tests/face/photos.py's ``long_lashes`` (512x512, its lashes turning with the lid). Usage::

    python benchmarks/quality/idle_motion.py                # ~20 s on the 2-core machine
    python benchmarks/quality/idle_motion.py --frames 100 [--long-lashes]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import cv2  # noqa: E402
from PIL import Image  # noqa: E402

from avatargen.compose.idle_motion import IdleMotion, IdleMotionSettings  # noqa: E402
from avatargen.compose.layout import FaceLayout  # noqa: E402
from avatargen.data.examples import HELDOUT_SEEDS_START  # noqa: E402
from avatargen.data.identity import identity_from_seed  # noqa: E402
from avatargen.data.render import FaceRenderer  # noqa: E402
from avatargen.face.detector import shared_detector  # noqa: E402

SIZES = (256, 512, 1024)
FPS = 25


def time_warp(frame: np.ndarray, layout: FaceLayout, frames: int,
              photo: bool = False) -> dict[str, tuple[float, float]]:  # fmt: skip
    """{"sway": (mean ms, p95 ms), "blink": (...)} over ``frames`` frames of each kind (``photo``: a photograph's
    lids)."""
    motion = IdleMotion(layout, frame.shape[:2], FPS, seed=0, settings=IdleMotionSettings(), textured_lids=photo)
    motion.warp(frame, 0)  # first call: OpenCV's one-off setup
    blinking = [i for i in range(FPS * 600) if motion.eye_closure(i) > 0][:frames]
    still = [i for i in range(FPS * 600) if motion.eye_closure(i) == 0][:frames]
    result = {}
    for kind, indices in (("sway", still), ("blink", blinking)):
        costs = []
        for index in indices:
            start = time.perf_counter()
            motion.warp(frame, index)
            costs.append((time.perf_counter() - start) * 1000.0)
        result[kind] = (float(np.mean(costs)), float(np.percentile(costs, 95)))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=200, help="frames timed per size and kind")
    parser.add_argument("--long-lashes", action="store_true", help="a photograph with long lashes, 512x512")
    args = parser.parse_args()
    cv2.setNumThreads(1)
    print("| frame | sway ms (mean / p95) | blink ms (mean / p95) |")
    print("|---|---|---|")
    if args.long_lashes:
        from tests.face.photos import long_lashes

        photo = long_lashes()
        cost = time_warp(photo, FaceLayout.from_face(shared_detector().find(photo)), args.frames, photo=True)
        print(f"| long_lashes 512x512 | {cost['sway'][0]:.2f} / {cost['sway'][1]:.2f} "
              f"| {cost['blink'][0]:.2f} / {cost['blink'][1]:.2f} |")  # fmt: skip
        return
    base = FaceRenderer(identity_from_seed(HELDOUT_SEEDS_START + 1), 256).render()[0]
    face = shared_detector().find(base)
    if face is None:
        raise SystemExit("the benchmark avatar's face was not found")
    for size in SIZES:
        frame = np.asarray(Image.fromarray(base).resize((size, size), Image.Resampling.BICUBIC))
        layout = FaceLayout.from_face(face).moved(size / 256, (0.0, 0.0))
        cost = time_warp(frame, layout, args.frames)
        print(f"| {size}x{size} | {cost['sway'][0]:.2f} / {cost['sway'][1]:.2f} "
              f"| {cost['blink'][0]:.2f} / {cost['blink'][1]:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
