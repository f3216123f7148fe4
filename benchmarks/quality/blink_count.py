"""Are a photograph's blinks counted? ``avatargen eval``'s blink measure (avatargen/eval/blinks.py) over the blinks
the idle motion draws, on the portrait judge's photos (benchmarks/quality/portrait_judge.py's ``portraits``).

    python benchmarks/quality/blink_count.py [--photos low_contrast,astronaut] [--seconds 20]

Each photo is composited for ``--seconds`` with the default idle motion (head swaying) at 30 blinks a minute, its
mouth shut (the compositor without the model: no audio), and every frame goes through the eval's face tracker, as
``avatargen eval`` reads a video (without its encoding). Prints per photo the blinks drawn (runs of frames whose
lids are more than half shut), those counted, and those counted from the eye openness alone (no eyes' dark).
About a minute a photo on the 2-core machine. It measures the checkout it lives in (the portrait judge's photos
import it): to compare another, run that checkout's copy of this script.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

FPS = 25
PHOTOS = ("astronaut,grace_hopper,turned_30,grace_turned,dark,grey,low_contrast,open_mouth,small,bearded,sepia_open,"
          "long_lashes")


def count(name: str, picture: np.ndarray, seconds: int, folder: Path) -> tuple[int, int, int]:
    """(drawn, counted, counted from openness alone) over ``seconds`` of ``picture``'s idle motion."""
    from avatargen.config.loader import load_config, to_config
    from avatargen.eval.blinks import measure_blinks
    from avatargen.eval.face_track import FaceTracker
    from avatargen.face.detector import shared_detector
    from avatargen.io.image import load_reference, save_png
    from avatargen.render import compositor_for

    save_png(folder / f"{name}.png", picture)
    config = to_config(load_config(["pipeline.idle_motion.blinks_per_minute=30"]))
    loaded = load_reference(folder / f"{name}.png", 256, "face", lambda line: None)
    compositor = compositor_for(loaded, config, warn=lambda line: None)
    motion = compositor.warp.__self__  # the IdleMotion: when it shuts the eyes
    shut = np.array([motion.eye_closure(i) for i in range(seconds * FPS)]) > 0.5
    drawn = int(np.sum(np.diff(np.r_[0, shut.astype(int)]) == 1))
    tracker = FaceTracker(shared_detector(), embed_every=10**9)
    generated = np.repeat(loaded.square[None], FPS, axis=0)  # the model's frames: not read for a photograph
    for start in range(0, seconds * FPS, FPS):
        for index, frame in enumerate(compositor.compose(generated, start), start):
            tracker.update(index, frame)
    track = tracker.track.arrays()
    counted = measure_blinks(track["eyes"], FPS, track["eye_dark"])["blinks"]
    return drawn, counted, measure_blinks(track["eyes"], FPS)["blinks"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--photos", default=PHOTOS, help="comma-separated names from portrait_judge.portraits()")
    parser.add_argument("--seconds", type=int, default=20)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import cv2
    from portrait_judge import portraits

    cv2.setNumThreads(1)  # as a render composites
    photos = portraits()
    print(f"# {Path(__file__).resolve().parents[2]} {args.seconds} s a photo, 30 blinks a minute, head swaying\n")
    print("| photo | drawn | counted | openness alone |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for name in args.photos.split(","):
            drawn, counted, alone = count(name, photos[name], args.seconds, Path(folder))
            print(f"| {name} | {drawn} | {counted} | {alone} |", flush=True)


if __name__ == "__main__":
    main()
