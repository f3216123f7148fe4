"""How much each style word of ``--prompt`` changes a render of the bundled model, against no prompt.

Renders ``examples/avatar_1.png`` speaking the first 4 s of ``examples/speech_1.flac`` once with no prompt and once
per style word the generator was trained with (``avatargen/data/examples.py``'s prompts, the words of
``avatargen/data/pose.py``), all with the same seed, and once with no prompt and another seed (the size of a change
nobody asked for, for scale). For each it prints the mean absolute difference to the no-prompt render in grey
levels, over the whole frame and inside the mouth region (the inner ellipse of the reference compositor's mouth
mask, ``MOUTH_REGION``, placed on the crop square the model's input was cut from), and the evaluator's mouth
opening (mean over frames) beside the no-prompt one. Prints a markdown table.

    python benchmarks/quality/prompt_effect.py [--styles "nodding,looking left"] [--keep DIR] [override ...]
    # override e.g. pipeline.composite=false: the model's own frame; --keep DIR keeps the renders (0.mp4: no prompt)
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

import numpy as np
import soundfile as sf

from avatargen.compose.composite import MOUTH_REGION
from avatargen.eval import evaluate_video
from avatargen.eval.face_track import FaceTracker
from avatargen.eval.video import analysis_size, iter_frames, probe_video
from avatargen.face.detector import FaceDetector
from avatargen.io.audio import load_audio
from avatargen.io.image import load_reference

REPO = Path(__file__).resolve().parents[2]
IMAGE = REPO / "examples" / "avatar_1.png"
STYLES = ("smiling", "serious", "nodding", "looking left", "looking right", "surprised", "calm", "cheerful",
          "excited", "relaxed")  # fmt: skip
SECONDS = 4.0
_GRAY = np.array([0.299, 0.587, 0.114], np.float32)


def render(audio: Path, out: Path, prompt: str | None, overrides: list[str]) -> None:
    cmd = [sys.executable, "-m", "avatargen", "render", "-i", str(IMAGE), "-a", str(audio), "-o", str(out), "--quiet",
           "runtime.threads=1", *overrides] + (["--prompt", prompt] if prompt else [])  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if result.returncode != 0:
        sys.exit(f"render failed: {result.stderr.strip()}")


def gray_frames(video: Path) -> np.ndarray:
    """(T, H, W) float32 grey levels of every frame, at the video's own size (<= 512 px here)."""
    size = analysis_size(probe_video(video))
    return np.stack([frame.astype(np.float32) @ _GRAY for frame in iter_frames(video, size)])


def mouth_mask(shape: tuple[int, int]) -> np.ndarray:
    """(H, W) bool: the inner ellipse of the compositor's mouth mask (full blend weight) in the output frame."""
    crop = load_reference(IMAGE, 256, "face", lambda _: None).crop
    left, top, side = crop
    height, width = shape
    fx = ((np.arange(width) + 0.5) - left) / side  # the output is the picture at its own size (256x256)
    fy = ((np.arange(height) + 0.5) - top) / side
    (cx, cy), (ax, ay) = MOUTH_REGION.centre, MOUTH_REGION.half_axes
    return ((fx[None, :] - cx) / ax) ** 2 + ((fy[:, None] - cy) / ay) ** 2 <= 1.0


def mouth_opening(video: Path, audio: Path) -> float:
    """The evaluator's mouth opening (docs/eval.md), mean over the frames with a face."""
    tracker = FaceTracker(FaceDetector(), embed_every=10_000)
    for index, frame in enumerate(iter_frames(video, analysis_size(probe_video(video)))):
        tracker.update(index, frame)
    return float(np.nanmean(tracker.track.arrays()["mouth"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--styles", default=",".join(STYLES), help="comma-separated prompts to measure")
    parser.add_argument("--keep", type=Path, default=None, help="write the renders here instead of a temporary folder")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    styles = [s.strip() for s in args.styles.split(",") if s.strip()]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) if args.keep is None else args.keep
        folder.mkdir(parents=True, exist_ok=True)
        audio = folder / "speech.wav"
        sf.write(audio, load_audio(REPO / "examples" / "speech_1.flac", 16000)[: int(SECONDS * 16000)], 16000)
        runs: list[tuple[str, str | None, list[str]]] = [("(none)", None, ["seed=0"])]
        runs += [(style, style, ["seed=0"]) for style in styles] + [("(none), seed 1", None, ["seed=1"])]
        videos = {}
        for label, prompt, seed in runs:
            videos[label] = folder / f"{len(videos)}.mp4"
            render(audio, videos[label], prompt, args.overrides + seed)
        base = gray_frames(videos["(none)"])
        mask = mouth_mask(base.shape[1:])
        base_mouth = mouth_opening(videos["(none)"], audio)
        sync = evaluate_video(videos["(none)"], audio)
        print(f"# --prompt effect, {IMAGE.name}, {SECONDS:g} s of speech_1, {date.today()}, {platform.machine()}, "
              f"overrides {args.overrides or 'none'}; no-prompt render: offset {sync['offset_frames']}, "
              f"confidence {sync['sync_confidence']}")  # fmt: skip
        print("| prompt | whole frame (grey levels) | mouth region | max in mouth region | mouth opening (none: "
              f"{base_mouth:.4f}) |")  # fmt: skip
        print("|---|---|---|---|---|")
        for label, _, _ in runs[1:]:
            frames = gray_frames(videos[label])
            count = min(len(frames), len(base))
            diff = np.abs(frames[:count] - base[:count])  # (T, H, W)
            opening = mouth_opening(videos[label], audio)
            print(f"| {label} | {diff.mean():.2f} | {diff[:, mask].mean():.2f} | {diff[:, mask].max():.0f} | "
                  f"{opening:.4f} ({opening / base_mouth - 1:+.1%}) |")  # fmt: skip


if __name__ == "__main__":
    main()
