"""Render several audio durations and print TTFF, generation fps, RTF and peak RSS for each.

Peak RSS must stay flat as the duration grows (target: <= 5 % from the shortest to the longest): the pipeline keeps
only the reference conditioning and the anchors between chunks.

    python benchmarks/memory/render_durations.py --durations 10 60 300 [override ...]
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

REPO = Path(__file__).resolve().parents[2]


def speechlike(path: Path, seconds: float, rate: int = 16000) -> None:
    t = np.arange(int(seconds * rate)) / rate
    envelope = np.clip(np.sin(2 * np.pi * 4.0 * t), 0, None) * (np.sin(2 * np.pi * 0.5 * t) > -0.3)
    voice = sum(np.sin(2 * np.pi * f * t) / k for k, f in enumerate((140, 280, 420, 560), start=1))
    sf.write(path, (0.3 * envelope * voice).astype(np.float32), rate)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--durations", type=float, nargs="+", default=[10, 60, 300])
    parser.add_argument("--image", default=str(REPO / "examples" / "avatar_1.png"))
    parser.add_argument("overrides", nargs="*", default=["model.weights=random"])
    args = parser.parse_args()
    print(f"# {date.today()} {platform.node()} {platform.processor() or platform.machine()} overrides={args.overrides}")
    print(f"{'audio_s':>8} {'frames':>7} {'ttff_s':>7} {'gen_fps':>8} {'rtf':>6} {'peak_rss_mb':>12} {'rss_end_mb':>11}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seconds in args.durations:
            audio = Path(tmp) / f"a{seconds:g}.wav"
            speechlike(audio, seconds)
            out = Path(tmp) / f"o{seconds:g}.mp4"
            cmd = [sys.executable, "-m", "avatargen", "render", "-i", args.image, "-a", str(audio), "-o", str(out),
                   "--json", "--quiet", *args.overrides]
            result = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
            if result.returncode != 0:
                sys.exit(f"render of {seconds} s failed: {result.stderr.strip()}")
            report = json.loads(result.stdout)
            rows.append(report)
            print(f"{seconds:>8g} {report['frames']:>7} {report['ttff_s']:>7.2f} {report['gen_fps']:>8.2f} "
                  f"{report['rtf']:>6.2f} {report['peak_rss_mb']:>12.1f} {report.get('rss_end_mb') or 0:>11.1f}", flush=True)
    growth = rows[-1]["peak_rss_mb"] / rows[0]["peak_rss_mb"] - 1
    print(f"peak RSS growth {args.durations[0]:g} s -> {args.durations[-1]:g} s: {growth * 100:+.1f} %")
    if rows[0].get("rss_end_mb") and rows[-1].get("rss_end_mb"):
        steady = rows[-1]["rss_end_mb"] / rows[0]["rss_end_mb"] - 1
        print(f"RSS after the last segment, {args.durations[0]:g} s -> {args.durations[-1]:g} s: {steady * 100:+.1f} %")
    stages = rows[-1]["stage_s"]
    compute = sum(stages[k] for k in ("init", "context", "a2v", "sr", "decode"))  # the modules' own work
    print("stage seconds of the longest render:", json.dumps(stages))
    print("share of module compute:", ", ".join(f"{k} {stages[k] / compute:.0%}" for k in ("init", "context", "a2v", "sr", "decode")))
    print(f"framework overhead (wall / module compute - 1): {rows[-1]['wall_s'] / compute - 1:+.1%}")


if __name__ == "__main__":
    main()
