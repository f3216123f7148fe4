"""Does the generated mouth drift over a long render? Its colour and shape in the pauses, against the reference.

In a pause the mouth should be the same shut mouth at minute 10 as at second 1. For every frame whose audio is
silent (RMS below 5 % of the median RMS of the speaking frames), the mouth box of the frame (the eval's
``mouth_box``, in output pixels) is compared with the same box of the reference picture: mean absolute difference
(grey levels, all channels) and the per-channel mean colour offset. Printed per ``--window`` seconds, with a
least-squares slope per minute over the whole render; a drift shows as a slope well above the window-to-window
spread.

    python benchmarks/quality/mouth_drift.py VIDEO.mp4 AUDIO.wav REFERENCE.png --box X0,Y0,X1,Y1 [--window 20]

The box must be in the video's pixels, and the reference is resized to the video's size (both are 256x256 for the
bundled examples, with or without compositing).
"""

from __future__ import annotations

import argparse

import numpy as np
from PIL import Image

from avatargen.eval.video import iter_frames, probe_video
from avatargen.io.audio import load_audio

RATE = 16000


def frame_rms(audio: np.ndarray, fps: float, frames: int) -> np.ndarray:
    """Audio RMS over each video frame's span, (frames,)."""
    hop = RATE / fps
    out = np.zeros(frames)
    for i in range(frames):
        piece = audio[int(i * hop) : int((i + 1) * hop)]
        out[i] = np.sqrt(np.mean(piece**2)) if piece.size else 0.0
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("video")
    parser.add_argument("audio")
    parser.add_argument("reference")
    parser.add_argument("--box", required=True, help="X0,Y0,X1,Y1 in the video's pixels (eval --json mouth_box)")
    parser.add_argument("--window", type=float, default=20.0, help="seconds per printed row")
    args = parser.parse_args()
    x0, y0, x1, y1 = (int(v) for v in args.box.split(","))
    info = probe_video(args.video)
    size = (info.width, info.height)
    reference = np.asarray(Image.open(args.reference).convert("RGB").resize(size, Image.BICUBIC), np.float64)
    ref_box = reference[y0:y1, x0:x1]  # (h, w, 3)
    audio = load_audio(args.audio, RATE)
    total = int(round(audio.size / RATE * info.fps))
    rms = frame_rms(audio, info.fps, total)
    silent = rms < 0.05 * np.median(rms[rms > 0.1 * rms.max()])

    times, mad, colour = [], [], []
    for index, frame in enumerate(iter_frames(args.video, size)):
        if index >= total or not silent[index]:
            continue
        box = frame[y0:y1, x0:x1].astype(np.float64)
        times.append(index / info.fps)
        mad.append(np.abs(box - ref_box).mean())
        colour.append((box - ref_box).reshape(-1, 3).mean(axis=0))
    times, mad, colour = np.array(times), np.array(mad), np.array(colour)
    print(f"{args.video}: {times.size} pause frames of {total}")
    print("| seconds | pause frames | mouth MAD to reference | colour offset R / G / B |")
    print("|---|---|---|---|")
    for start in np.arange(0.0, total / info.fps, args.window):
        sel = (times >= start) & (times < start + args.window)
        if sel.any():
            r, g, b = colour[sel].mean(axis=0)
            print(f"| {start:.0f}-{start + args.window:.0f} | {sel.sum()} | {mad[sel].mean():.2f} | {r:+.2f} / {g:+.2f} / {b:+.2f} |")
    slope = np.polyfit(times / 60.0, mad, 1)[0] if times.size > 1 else float("nan")
    print(f"slope of the pause-mouth MAD: {slope:+.3f} grey levels per minute (mean {mad.mean():.2f})")


if __name__ == "__main__":
    main()
