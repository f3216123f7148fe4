"""How a drawn face blinks: a contact sheet of one blink on the bundled cartoons, a held-out training-style avatar
and the stylised 3-D cartoon (``tests/face/photos.py``), each row from the open eyes through the shut ones and back,
at 2x (a video pixel a 2x2 block), and per face the measures ``tests/compose/test_idle_motion.py`` pins on the most
shut frame (``drawn_blink_measures``): the share of the lid's pixels unlike the cheek (streaks), how far the brow's
region moved (levels) and the eye's white pixels still white.

    python benchmarks/quality/drawn_blinks.py [--sheet docs/images/drawn_blinks.jpg]

The frames are the idle motion's warp (``IdleMotion``, drawn lids) of the picture itself: no model, no speech, head
motion off. A few seconds on the 2-core machine.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
from PIL import Image, ImageDraw  # noqa: E402

from avatargen.compose.idle_motion import IdleMotion, IdleMotionSettings  # noqa: E402
from avatargen.compose.layout import FaceLayout  # noqa: E402
from avatargen.data.examples import HELDOUT_SEEDS_START  # noqa: E402
from avatargen.data.identity import identity_from_seed  # noqa: E402
from avatargen.data.render import FaceRenderer  # noqa: E402
from avatargen.face.detector import shared_detector  # noqa: E402
from avatargen.io.image import load_reference  # noqa: E402
from tests.compose.test_idle_motion import drawn_blink_measures  # noqa: E402
from tests.face.photos import stylised_3d  # noqa: E402

FPS, SEED, SCALE = 25, 7, 2


def faces() -> dict[str, np.ndarray]:
    """The drawn faces, each its 256x256 (the stylised one 512x512) picture."""
    bundled = {name: load_reference(REPO / "examples" / f"{name}.png", 256, "face", lambda line: None).square
               for name in ("avatar_1", "avatar_2", "avatar_3")}  # fmt: skip
    return {**bundled, "held-out avatar": FaceRenderer(identity_from_seed(HELDOUT_SEEDS_START + 1), 256).render()[0],
            "stylised 3-D": stylised_3d()}  # fmt: skip


def blink_row(frame: np.ndarray, layout: FaceLayout) -> tuple[Image.Image, np.ndarray]:
    """The eyes' band over one blink's frames side by side (at ``SCALE``), and its most shut frame."""
    motion = IdleMotion(layout, frame.shape[:2], FPS, SEED, IdleMotionSettings(head_motion=False))
    most = max(range(FPS * 10), key=motion.eye_closure)
    indices = [most - 4] + [i for i in range(most - 3, most + 5) if motion.eye_closure(i) > 0]
    eyes, width = layout.points[:4], layout.face_width
    (x0, y0), (x1, y1) = eyes.min(axis=0) - 0.15 * width, eyes.max(axis=0) + 0.12 * width
    box = (int(x0), int(y0 - 0.1 * width), int(x1), int(y1))
    crops = [Image.fromarray(motion.warp(frame, i)).crop(box) for i in indices]
    w, h = crops[0].size
    scale = SCALE * 256 / frame.shape[0]  # every face's band at the same size
    size = (round(w * scale), round(h * scale))
    row = Image.new("RGB", (size[0] * len(crops), size[1]), "white")
    for k, crop in enumerate(crops):
        row.paste(crop.resize(size, Image.NEAREST if scale >= 1 else Image.LANCZOS), (k * size[0], 0))
    return row, motion.warp(frame, most)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sheet", type=Path, help="where to write the contact sheet (.png, .jpg)")
    args = parser.parse_args()
    rows = []
    print("| face | lid unlike the cheek | brow moved, levels | white left |\n|---|---|---|---|")
    for name, frame in faces().items():
        layout = FaceLayout.from_face(shared_detector().find(frame))
        row, shut = blink_row(frame, layout)
        unlike, moved, white = drawn_blink_measures(frame, shut, layout)
        print(f"| {name} | {unlike:.3f} | {moved:.2f} | {white} |")
        label = Image.new("RGB", (row.width, 14), "white")
        ImageDraw.Draw(label).text((2, 1), name, fill="black")
        rows.extend([label, row])
    if args.sheet is not None:
        sheet = Image.new("RGB", (max(r.width for r in rows), sum(r.height for r in rows)), "white")
        y = 0
        for r in rows:
            sheet.paste(r, (0, y))
            y += r.height
        sheet.save(args.sheet, quality=92)
        print(f"sheet: {args.sheet}")


if __name__ == "__main__":
    main()
