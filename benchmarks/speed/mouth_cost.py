"""Cost per frame of putting the mouth into the reference: ``pipeline.mouth=blend`` against ``warp``.

The reference is skimage's astronaut (512x512) or ``examples/avatar_1.png`` (256x256), framed as a render frames
it; the model frames are a held-out training avatar drawn with its mouth wide open (every frame warped: the worst
case) and shut (warp leaves the reference as it is). Batches of 4 frames (the decoder's micro-batch), the median of
``--repeats`` batches of ``ReferenceCompositor.paste`` (idle motion not included). Prints ms per frame.

    python benchmarks/speed/mouth_cost.py [--threads 1] [--repeats 20]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import cv2
from PIL import Image

from avatargen.compose.composite import ReferenceCompositor
from avatargen.compose.mouth_warp import ModelMapping, MouthCue, MouthWarp
from avatargen.face.domain import square_is_photo
from avatargen.data import FacePose, FaceRenderer, identity_from_seed
from avatargen.face.choice import reference_lips
from avatargen.face.framing import frame_face

REPO = Path(__file__).resolve().parents[2]


def _pictures() -> dict[str, np.ndarray]:
    import skimage.data

    return {"astronaut 512x512": skimage.data.astronaut(),
            "avatar_1 256x256": np.asarray(Image.open(REPO / "examples" / "avatar_1.png").convert("RGB"))}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    cv2.setNumThreads(args.threads)  # the compositing's resampling (avatargen/compose/)
    renderer = FaceRenderer(identity_from_seed(1_000_003), 256)
    frames = {"open": renderer.render(FacePose(mouth_open=1.0))[0], "shut": renderer.render(FacePose())[0]}
    print(f"| reference | model mouth | blend ms/frame | warp ms/frame (threads={args.threads}) |\n|---|---|---|---|")
    for name, picture in _pictures().items():
        framing = frame_face(picture, lambda line: None)
        compositor = ReferenceCompositor(picture, framing.square, 256, framing.face)
        cue = MouthCue.colour if square_is_photo(framing.crop) else MouthCue.dark  # as a render chooses it
        lips = compositor.to_output(reference_lips(picture, framing.face).lips)
        warp = MouthWarp(compositor.background, lips, ModelMapping(*compositor.model_pixel_mapping()), cue)
        for state, frame in frames.items():
            generated = np.repeat(frame[None], 4, axis=0)
            cost = {}
            for mode, paste in (("blend", None), ("warp", warp)):
                compositor.mouth = paste
                times = []
                for _ in range(args.repeats):
                    started = time.perf_counter()
                    compositor.paste(generated)
                    times.append((time.perf_counter() - started) * 1000 / len(generated))
                cost[mode] = float(np.median(times))
            print(f"| {name} | {state} | {cost['blend']:.2f} | {cost['warp']:.2f} |")


if __name__ == "__main__":
    main()
