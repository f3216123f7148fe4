"""The mouth drawn where the lips are: mouth spill and lip sync on the test photos, sync and sharpness on the cartoons.

Renders each test photo of tests/face/photos.py (the astronaut, Grace Hopper, the astronaut tilted and small in a
half-body picture, a synthetic face smiling with its teeth) with speech no model has heard (espeak-ng sentences,
a seed of their own), then measures with ``avatargen eval`` against the photo: ``mouth_spill_frames`` (share of
frames with more than 15 % of their darkened pixels outside the lips' reach; target < 5 %), lip-sync offset
(target 0) and confidence against its chance level (target >= 3x). ``--cartoons`` also renders the three examples
with 30 s of their own speech (``--eval``'s sync confidence and sharpness: to stay within 0.02 of the tree before).

``--eval-only`` measures the videos an earlier run left in ``--out`` again. ``--tree DIR`` renders with another source tree (e.g. ``git archive`` of an older commit, to compare); the
measures always come from this one. ``--out DIR`` keeps the videos, the photos and their ``--mouth-sheet`` PNGs.

    python benchmarks/quality/lip_contours.py --out /tmp/lips [--tree /tmp/before] [--cartoons] [--seconds 20]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

import numpy as np
import soundfile as sf

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from avatargen.data.speech import random_utterance  # noqa: E402
from avatargen.eval import evaluate_video  # noqa: E402
from avatargen.eval.sheet import write_mouth_sheet  # noqa: E402
from avatargen.io.image import save_png  # noqa: E402
from benchmarks.quality.model_quality import long_audio  # noqa: E402
from tests.face.photos import TEST_PHOTOS  # noqa: E402

SPEECH_SEED = 28_028  # not a seed of the training recipe's audio: speech the model has not heard


def render(tree: Path, image: Path, audio: Path, output: Path, *extra: str) -> dict:
    """Render with the source tree ``tree``; the ``--json`` report."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    command = [sys.executable, "-m", "avatargen", "render", "-i", str(image), "-a", str(audio), "-o", str(output),
               "--json", "-q", *extra]  # fmt: skip
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=Path, default=ROOT)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--photos", default=",".join(TEST_PHOTOS))
    parser.add_argument("--cartoons", action="store_true")
    parser.add_argument("--eval-only", action="store_true", help="measure the videos already in --out again")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="lips-"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"# {date.today()} {platform.node()} tree={args.tree} seconds={args.seconds}\n")
    speech = out / "unseen_speech.wav"
    if not args.eval_only:
        sf.write(speech, random_utterance(np.random.default_rng(SPEECH_SEED), args.seconds), 16000)
    print("| photo | spill frames (> 15 %) | spill mean / p95 | offset | confidence | chance mean / best | conf / chance best |")
    print("|---|---|---|---|---|---|---|")
    for name in [n for n in args.photos.split(",") if n]:
        photo = out / f"{name}.png"
        save_png(photo, TEST_PHOTOS[name]())
        video = out / f"{name}.mp4"
        if not args.eval_only:
            render(args.tree, photo, speech, video)
        result = evaluate_video(video, speech, reference=photo, curves=True)
        write_mouth_sheet(out / f"{name}_mouths.png", video, result)
        conf, chance, best = result["sync_confidence"], result["sync_chance"], result["sync_chance_max"]
        ratio = f"{conf / best:.1f}x" if conf and best else "-"
        print(f"| {name} | {result['mouth_spill_frames']} | {result.get('mouth_spill_mean')} / "
              f"{result.get('mouth_spill_p95')} | {result['offset_frames']} | {conf} | {chance} / {best} | {ratio} |",
              flush=True)  # fmt: skip
    if args.cartoons:
        audio = out / "speech_30s.wav"
        if not args.eval_only:
            long_audio(audio, 30.0)
        print("\n| cartoon (30 s) | sync offset | confidence | chance best | sharpness | identity | spill frames |")
        print("|---|---|---|---|---|---|---|")
        for i in (1, 2, 3):
            image = ROOT / "examples" / f"avatar_{i}.png"
            video = out / f"avatar_{i}.mp4"
            report = evaluate_video(video, audio, reference=image) if args.eval_only else render(
                args.tree, image, audio, video, "--eval")  # fmt: skip
            spill = evaluate_video(video, audio, reference=image)["mouth_spill_frames"]
            print(f"| avatar_{i} | {report['offset_frames']} | {report['sync_confidence']} | "
                  f"{report['sync_chance_max']} | {report['sharpness']} | {report['identity_distance']} | {spill} |",
                  flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
