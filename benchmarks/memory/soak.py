"""Soak test (a benchmark, not CI): one long CPU render, with peak RSS sampled over time and every frame accounted for.

Checks at the end: RSS flat over the render (the last quarter's peak vs the first quarter's, after warm-up), frame
count == round(duration x fps) by decoding the output, video and audio durations within one frame (0 frames of
drift), and every frame decodable.

    python benchmarks/memory/soak.py --minutes 60 [override ...]     # the real soak (about 2-3 h on a 2-core CPU)
    python benchmarks/memory/soak.py --minutes 2                     # a quick check that it works
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks.memory.render_durations import speechlike  # noqa: E402
from tests.ffmpeg_probe import probe  # noqa: E402


def rss_mb(pid: int) -> float:
    """Current resident memory of ``pid`` (not its children: ffmpeg's memory is its own), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=60.0, help="audio duration in minutes")
    parser.add_argument("--image", default=str(REPO / "examples" / "avatar_1.png"))
    parser.add_argument("--interval", type=float, default=2.0, help="RSS sampling interval in seconds")
    parser.add_argument("overrides", nargs="*", default=["model.weights=random", "runtime.threads=1"])
    args = parser.parse_args()
    seconds = args.minutes * 60
    print(f"# {date.today()} {platform.node()} {platform.processor() or platform.machine()} "
          f"audio={seconds:g}s overrides={args.overrides}", flush=True)  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        audio, out = Path(tmp) / "soak.wav", Path(tmp) / "soak.mp4"
        speechlike(audio, seconds)
        cmd = [sys.executable, "-m", "avatargen", "render", "-i", args.image, "-a", str(audio), "-o", str(out),
               "--json", "--quiet", *args.overrides]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        started = time.monotonic()
        process = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        samples: list[tuple[float, float]] = []
        while process.poll() is None:
            try:
                samples.append((time.monotonic() - started, rss_mb(process.pid)))
            except OSError:
                break
            time.sleep(args.interval)
        stdout, stderr = process.communicate()
        if process.returncode != 0:
            sys.exit(f"soak render failed ({process.returncode}): {stderr.strip()}")
        report = json.loads(stdout)
        info = probe(out)
    fps = report["fps"]
    expected = round(seconds * fps)
    quarter = max(1, len(samples) // 4)
    early = max(r for _, r in samples[quarter : 2 * quarter] or samples)  # after model build and warm-up
    late = max(r for _, r in samples[-quarter:])
    drift = round((info["audio_duration_s"] - info["video_duration_s"]) * fps, 2)
    result = {
        "audio_s": seconds, "frames": report["frames"], "expected_frames": expected, "decoded_frames": info["frames"],
        "video_s": info["video_duration_s"], "audio_out_s": round(info["audio_duration_s"], 4), "drift_frames": drift,
        "wall_s": report["wall_s"], "rtf": report["rtf"], "gen_fps": report["gen_fps"],
        "rss_samples": len(samples), "rss_mb_2nd_quarter_peak": round(early, 1), "rss_mb_last_quarter_peak": round(late, 1),
        "rss_growth_pct": round((late / early - 1) * 100, 2), "peak_rss_mb": report["peak_rss_mb"],
    }  # fmt: skip
    print(json.dumps(result, indent=1))
    print("RSS over time (s, MiB):", " ".join(f"{t:.0f}:{r:.0f}" for t, r in samples[:: max(1, len(samples) // 20)]))
    ok = (report["frames"] == info["frames"] == expected and abs(drift) < 1 and result["rss_growth_pct"] <= 5)
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
