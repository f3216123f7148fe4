"""Re-create the bundled examples: three held-out avatars (never trained on) and three real speech clips (espeak-ng).

    python examples/make_examples.py
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import soundfile as sf
from PIL import Image

from avatargen.data.identity import identity_from_seed
from avatargen.data.pose import NEUTRAL
from avatargen.data.render import FaceRenderer
from avatargen.data.speech import synthesize_speech
from avatargen.io.ffmpeg import ffmpeg_exe

HERE = Path(__file__).resolve().parent
AVATAR_SEEDS = (1_000_000, 1_000_003, 1_000_009)  # the held-out range starts at 1,000,000
SPEECH = (
    ("en-us", 150, 45, "Hello! I am an avatar rendered by avatargen. Every frame you see was generated from one picture and this voice."),
    ("en-gb", 165, 60, "Our quarterly results are in. Sales grew in every region, and the new product line did better than we hoped."),
    ("en-us+f3", 140, 55, "Welcome to the course. Today we will learn how to plan a small garden, step by step, from seeds to harvest."),
)


def main() -> None:
    for i, seed in enumerate(AVATAR_SEEDS, start=1):
        frame, _ = FaceRenderer(identity_from_seed(seed), 256).render(NEUTRAL)
        Image.fromarray(frame).save(HERE / f"avatar_{i}.png")
    for i, (voice, rate, pitch, text) in enumerate(SPEECH, start=1):
        wav = HERE / f"speech_{i}.wav"
        sf.write(wav, synthesize_speech(text, voice, rate, pitch, 16000), 16000)
        # FLAC keeps the committed files small and shows that any format ffmpeg reads works.
        subprocess.run([ffmpeg_exe(), "-y", "-v", "error", "-i", str(wav), str(HERE / f"speech_{i}.flac")], check=True)
        wav.unlink()


if __name__ == "__main__":
    main()
