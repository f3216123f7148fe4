"""Quality of a model on held-out identities and sentences, against the generator's own ground truth.

For each bundled example (an avatar never trained on + a real espeak-ng sentence never trained on):
  - the generator's ground-truth video for that identity and audio, evaluated;
  - our render (I chunks on), evaluated with its seams;
  - the same render with I chunks off (pipeline=no_interp), evaluated with its seams;
and a long render (default 5 minutes of concatenated speech) for identity drift. Prints a markdown table.

    python benchmarks/model_quality.py [--long-seconds 300] [override ...]
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
import soundfile as sf

from avatargen.data.examples import write_ground_truth_video
from avatargen.eval import evaluate_video
from avatargen.io.audio import load_audio

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
AVATAR_SEEDS = (1_000_000, 1_000_003, 1_000_009)  # examples/make_examples.py


def render(image: Path, audio: Path, out: Path, overrides: list[str]) -> dict:
    cmd = [sys.executable, "-m", "avatargen", "render", "-i", str(image), "-a", str(audio), "-o", str(out),
           "--json", "--quiet", "--eval", *overrides]
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
    print("| example | GT offset | GT conf | offset | conf | conf / GT | seam ratio (I on) | seam ratio (I off) | flicker | RTF |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for i, seed in enumerate(AVATAR_SEEDS, start=1):
            image, audio = EXAMPLES / f"avatar_{i}.png", EXAMPLES / f"speech_{i}.flac"
            gt_path = tmp / f"gt{i}.mp4"
            write_ground_truth_video(seed, audio, gt_path)
            gt = evaluate_video(gt_path, audio, reference=image)
            ours = render(image, audio, tmp / f"ours{i}.mp4", args.overrides)
            no_i = render(image, audio, tmp / f"noi{i}.mp4", [*args.overrides, "pipeline.interpolate=false"])
            row = {"example": i, "gt_offset": gt["offset_frames"], "gt_conf": gt["sync_confidence"],
                   "offset": ours["offset_frames"], "conf": ours["sync_confidence"],
                   "seam_on": ours["seam_ratio"], "seam_off": no_i["seam_ratio"], "flicker": ours["flicker"],
                   "rtf": ours["rtf"]}  # fmt: skip
            rows.append(row)
            print(f"| {i} | {row['gt_offset']} | {row['gt_conf']:.3f} | {row['offset']} | {row['conf']:.3f} | "
                  f"{row['conf'] / max(row['gt_conf'], 1e-6):.2f} | {row['seam_on']:.2f} | {row['seam_off']:.2f} | "
                  f"{row['flicker']:.2f} | {row['rtf']:.2f} |", flush=True)
        conf_ratio = sum(r["conf"] for r in rows) / max(sum(r["gt_conf"] for r in rows), 1e-6)
        print(f"\nmean confidence ratio (ours / ground truth): {conf_ratio:.2f}")
        if args.long_seconds > 0:
            audio = tmp / "long.wav"
            long_audio(audio, args.long_seconds)
            report = render(EXAMPLES / "avatar_1.png", audio, tmp / "long.mp4", args.overrides)
            print(f"long render {args.long_seconds:g} s: identity start {report['identity_start']:.4f}, end "
                  f"{report['identity_end']:.4f}, ratio {report['identity_ratio']:.4f}; offset {report['offset_frames']}, "
                  f"conf {report['sync_confidence']:.3f}; seam ratio {report['seam_ratio']:.2f}; RTF {report['rtf']:.2f}, "
                  f"TTFF {report['ttff_s']:.2f} s, peak RSS {report['peak_rss_mb']:.0f} MB")


if __name__ == "__main__":
    main()
