"""Barge-in: how soon after ``clear()`` the live avatar's mouth is at rest, as the frames are shown.

A ``LiveAvatar`` (avatargen/agents/live_avatar.py, what the LiveKit avatar runs) of examples/avatar_1.png is pushed
3 s of speech; once its speech has shown for a second, ``clear()``. The time to rest is from the call to the first
frame shown after it whose mouth region is within the idle frames' spread of the resting mouth; each round also
gives when the first frame after the call was shown (later than a frame interval only when the render stalled) and
whether it was at rest, and how long the face stays the held rest frame before live frames come back.

    python benchmarks/live/barge_in.py --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import imageio_ffmpeg
import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from avatargen.agents.live_avatar import LiveAvatar  # noqa: E402
from tests.live.speech_feed import mouth_box  # noqa: E402

AVATAR = REPO / "examples" / "avatar_1.png"
RATE = 24000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    box = mouth_box(AVATAR)
    speech = subprocess.run([imageio_ffmpeg.get_ffmpeg_exe(), "-v", "error", "-ss", "0.5", "-t", "3", "-i",
                             str(REPO / "examples" / "speech_1.flac"), "-f", "s16le", "-ar", str(RATE), "-ac", "1",
                             "pipe:1"], capture_output=True, check=True).stdout  # fmt: skip
    shown: list[tuple[float, np.ndarray, bool, bool]] = []  # (when, mouth region, with speech, the held rest frame)
    avatar = LiveAvatar(AVATAR, sample_rate=RATE)

    def on_frame(frame) -> None:
        region = frame.rgb[box[0] : box[1], box[2] : box[3]].astype(np.float32).mean(axis=2)
        shown.append((time.time(), region, bool(frame.audio), frame.rgb is avatar.rest_frame()))

    load = os.getloadavg()[0]
    avatar.start(on_frame)
    while len(shown) < 75:  # 3 s of idle frames: the resting mouth and its spread
        time.sleep(0.1)
    idle = np.stack([r for _, r, _, _ in shown[-50:]])
    rest = np.median(idle, axis=0)
    spread = float(np.percentile(np.abs(idle - rest).mean(axis=(1, 2)), 95))
    rounds = []
    for _ in range(args.rounds):
        avatar.push(speech)
        avatar.end_segment()
        while sum(s for _, _, s, _ in shown[-25:]) < 25:
            time.sleep(0.01)
        cleared_at, first = time.time(), len(shown)
        avatar.clear()
        time.sleep(2.0)
        after = shown[first:]
        at_rest = next(t for t, r, _, _ in after if np.abs(r - rest).mean() <= 1.5 * max(spread, 1.0))
        held = [t for t, _, _, h in after if h]
        first_at, first_region, _, _ = after[0]
        rounds.append({"to_rest_s": round(at_rest - cleared_at, 3),
                       "first_frame_after_s": round(first_at - cleared_at, 3),  # a stalled render shows it late
                       "first_frame_at_rest": bool(np.abs(first_region - rest).mean() <= 1.5 * max(spread, 1.0)),
                       "held_rest_frame_s": round(held[-1] - held[0] + 0.04, 2) if held else 0.0})  # fmt: skip
        time.sleep(1.0)
    avatar.close()
    to_rest = [r["to_rest_s"] for r in rounds]
    print(json.dumps({"to_rest_s": {"median": round(float(np.median(to_rest)), 3), "max": max(to_rest)},
                      "rounds": rounds, "underruns": avatar.report["realtime"]["underruns"],
                      "load_avg": [round(load, 2), round(os.getloadavg()[0], 2)]}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
