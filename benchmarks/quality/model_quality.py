"""Quality of a model on held-out identities and sentences, against the generator's own ground truth.

For each bundled example (an avatar never trained on + a real espeak-ng sentence never trained on):
  - the generator's ground-truth video for that identity and audio, evaluated;
  - our render (I chunks on), evaluated with its seams;
  - the same render with I chunks off (pipeline=no_interp), evaluated with its seams;
then a real photograph (skimage's astronaut, a half-body portrait, whole and as a non-square crop; no ground truth:
those columns are '-'), and a long render (default 5 minutes of concatenated speech) for identity drift. Prints a
markdown table.

    python benchmarks/quality/model_quality.py [--long-seconds 300] [override ...]
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

import numpy as np
import skimage.data
import soundfile as sf
from PIL import Image

from avatargen.data.examples import write_ground_truth_video
from avatargen.eval import evaluate_video
from avatargen.io.audio import load_audio

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
AVATAR_SEEDS = (1_000_000, 1_000_003, 1_000_009)  # examples/make_examples.py


def render(image: Path, audio: Path, out: Path, overrides: list[str]) -> dict:
    cmd = [sys.executable, "-m", "avatargen", "render", "-i", str(image), "-a", str(audio), "-o", str(out),
           "--json", "--quiet", "--eval", "runtime.threads=1", *overrides]
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if result.returncode != 0:
        sys.exit(f"render failed: {result.stderr.strip()}")
    return json.loads(result.stdout)


def long_audio(path: Path, seconds: float) -> None:
    """The three example sentences with pauses, repeated to ``seconds``."""
    pieces = []
    for i in (1, 2, 3):
        pieces += [load_audio(EXAMPLES / f"speech_{i}.flac", 16000), np.zeros(8000, np.float32)]
    clip = np.concatenate(pieces)
    reps = int(np.ceil(seconds * 16000 / clip.size))
    sf.write(path, np.tile(clip, reps)[: int(seconds * 16000)], 16000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--long-seconds", type=float, default=300.0)
    parser.add_argument("overrides", nargs="*", default=[])
    args = parser.parse_args()
    print(f"# {date.today()} {platform.node()} overrides={args.overrides}\n")
    print("| example | GT offset | GT conf (chance best) | offset | conf (chance best) | identity GT / ours | "
          "sharpness GT / ours | face found | seam stride found | seam ratio (I on) | seam ratio (I off) | flicker | RTF |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for i, seed in enumerate(AVATAR_SEEDS, start=1):
            image, audio = EXAMPLES / f"avatar_{i}.png", EXAMPLES / f"speech_{i}.flac"
            gt_path = tmp / f"gt{i}.mp4"
            write_ground_truth_video(seed, audio, gt_path)
            gt = evaluate_video(gt_path, audio, reference=image)
            ours = render(image, audio, tmp / f"ours{i}.mp4", args.overrides)
            no_i = render(image, audio, tmp / f"noi{i}.mp4", [*args.overrides, "pipeline.interpolate=false"])
            stride = ours["seam_period_frames"] if ours["seams_found"] else "none"
            print(f"| {i} | {_num(gt['offset_frames'])} | {_num(gt['sync_confidence'])} ({_num(gt['sync_chance_max'])}) | "
                  f"{_num(ours['offset_frames'])} | {_num(ours['sync_confidence'])} ({_num(ours['sync_chance_max'])}) | "
                  f"{_num(gt['identity_distance'])} / {_num(ours['identity_distance'])} | "
                  f"{_num(gt['sharpness'])} / {_num(ours['sharpness'])} | {ours['face_found']:.0%} | {stride} | "
                  f"{_num(ours['seam_ratio'])} | {_num(no_i['seam_ratio'])} | {ours['flicker']:.2f} | {ours['rtf']:.2f} |",
                  flush=True)  # fmt: skip
        photo = skimage.data.astronaut()
        for name, picture in (("astronaut 512x512", photo), ("astronaut crop 440x400", photo[20:420, 40:480])):
            image = tmp / f"{name.split()[1]}.png"
            Image.fromarray(picture).save(image)
            audio = EXAMPLES / "speech_1.flac"
            ours = render(image, audio, tmp / "photo.mp4", args.overrides)
            no_i = render(image, audio, tmp / "photo_noi.mp4", [*args.overrides, "pipeline.interpolate=false"])
            stride = ours["seam_period_frames"] if ours["seams_found"] else "none"
            print(f"| {name} ({ours['width']}x{ours['height']} out) | - | - | {_num(ours['offset_frames'])} | "
                  f"{_num(ours['sync_confidence'])} ({_num(ours['sync_chance_max'])}) | - / {_num(ours['identity_distance'])} | "
                  f"- / {_num(ours['sharpness'])} | {ours['face_found']:.0%} | {stride} | {_num(ours['seam_ratio'])} | "
                  f"{_num(no_i['seam_ratio'])} | {ours['flicker']:.2f} | {ours['rtf']:.2f} |", flush=True)  # fmt: skip
        if args.long_seconds > 0:
            audio = tmp / "long.wav"
            long_audio(audio, args.long_seconds)
            r = render(EXAMPLES / "avatar_1.png", audio, tmp / "long.mp4", args.overrides)
            print(f"\nlong render {args.long_seconds:g} s: identity distance {_num(r['identity_distance'])} "
                  f"(worst 10 s {_num(r['identity_distance_worst_window'])}, drift {_num(r['identity_drift'])}); "
                  f"offset {_num(r['offset_frames'])}, conf {_num(r['sync_confidence'])} (chance best "
                  f"{_num(r['sync_chance_max'])}); seam ratio {_num(r['seam_ratio'])}; face found {r['face_found']:.0%}; "
                  f"blinks/min {_num(r['blinks_per_min'])}; RTF {r['rtf']:.2f}, TTFF {r['ttff_s']:.2f} s, "
                  f"peak RSS {r['peak_rss_mb']:.0f} MB")  # fmt: skip


def _num(value) -> str:
    """A metric for the table: 'null' for a measure that declined to give a value."""
    if value is None:
        return "null"
    return f"{value:.3f}".rstrip("0").rstrip(".") if isinstance(value, float) else str(value)


if __name__ == "__main__":
    main()
