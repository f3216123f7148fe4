"""Talking clips built from real face photographs, for the evaluator's tests and benchmarks/quality/eval_faults.py.

The face is skimage's astronaut (Eileen Collins, public domain); the other person is matplotlib's Grace Hopper
photograph. A clip is the photo, cropped around the face and drifting by a few pixels (so the video is not a still),
with a dark mouth cavity drawn over the mouth whose height follows the audio loudness, as a talking mouth opens.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import imageio_ffmpeg
import matplotlib.cbook
import numpy as np
import skimage.data
import soundfile as sf
from PIL import Image, ImageDraw

FPS = 25
SIZE = 256
SR = 16000
HOP = SR // FPS  # audio samples per video frame


def astronaut() -> np.ndarray:
    """(512, 512, 3) uint8: a real, front-facing face photograph."""
    return skimage.data.astronaut()


def grace_hopper() -> np.ndarray:
    """(600, 512, 3) uint8: a photograph of another person."""
    return np.asarray(Image.open(matplotlib.cbook.get_sample_data("grace_hopper.jpg", asfileobj=False)).convert("RGB"))


def speech(seconds: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Speech-like audio: syllable humps of random length, loudness and spacing, with pauses, on a harmonic voice.
    Returns (audio (S,) float32 at SR, openness per video frame (T,) in [0, 1])."""
    rng = np.random.default_rng(seed)
    env = np.zeros(int(seconds * SR))
    t = 0.3
    while t < seconds - 0.4:
        if rng.random() < 0.15:
            t += rng.uniform(0.3, 0.7)  # a pause
        length = rng.uniform(0.12, 0.3)
        start, stop = int(t * SR), min(int((t + length) * SR), len(env))
        env[start:stop] = rng.uniform(0.5, 1.0) * np.sin(np.pi * np.arange(stop - start) / (length * SR))
        t += length + rng.uniform(0.03, 0.15)
    time = np.arange(len(env)) / SR
    voice = sum(np.sin(2 * np.pi * f * time) / k for k, f in enumerate((140, 280, 420, 560), start=1))
    frames = len(env) // HOP
    centred = np.pad(env, (HOP // 2, HOP))  # frame t shows the instant t / FPS: the 1/FPS of sound centred there
    openness = centred[: frames * HOP].reshape(frames, HOP).mean(axis=1)
    return (0.3 * env * voice).astype(np.float32), openness / max(openness.max(), 1e-9)


def talking_frames(openness: np.ndarray, photo: np.ndarray | None = None, jump_every: int = 0) -> np.ndarray:
    """(T, SIZE, SIZE, 3) uint8: ``photo`` (default: the astronaut) around its face, drifting slowly, the mouth
    opening with ``openness`` (T,). ``jump_every`` > 0: the framing jumps by 14 px every that many frames (a hard
    cut, as a chunked generator that loses continuity at its seams)."""
    photo = astronaut() if photo is None else photo
    face_box, mouth = _face_layout(photo)
    x0, y0, side = face_box
    frames = np.empty((len(openness), SIZE, SIZE, 3), np.uint8)
    for t, o in enumerate(openness):
        dx = 3.0 * np.sin(2 * np.pi * t / 90.0) + (14.0 if jump_every and (t // jump_every) % 2 else 0.0)
        dy = 2.0 * np.sin(2 * np.pi * t / 130.0)
        image = Image.fromarray(photo)
        draw = ImageDraw.Draw(image)
        mx, my, half_width = mouth
        half_height = 1.0 + 0.45 * half_width * float(o)
        draw.ellipse((mx - half_width, my - half_height, mx + half_width, my + half_height), fill=(70, 20, 25))
        box = (x0 + dx, y0 + dy, x0 + dx + side, y0 + dy + side)
        frames[t] = np.asarray(image.resize((SIZE, SIZE), Image.Resampling.BILINEAR, box=box))
    return frames


def _face_layout(photo: np.ndarray) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    """((left, top, side) of a square around the face, (x, y, half width) of the mouth) in photo pixels."""
    from avatargen.face.detector import FaceDetector

    face = FaceDetector().find(photo)
    eyes, nose = face.points[:4], face.points[4]
    span = float(np.linalg.norm(eyes[0] - eyes[2]))
    side = 2.2 * face.width
    cx, cy = face.centre
    return (cx - side / 2, cy - side / 2, side), (nose[0], nose[1] + 0.3 * span, 0.26 * span)


def write_mp4(path: Path, frames: np.ndarray, audio: np.ndarray | None = None, crf: int = 18, gop: int = 250) -> Path:
    """H.264 MP4 of ``frames`` (T, H, W, 3) uint8 at FPS, with ``audio`` (S,) at SR as AAC when given."""
    height, width = frames.shape[1:3]
    cmd = [imageio_ffmpeg.get_ffmpeg_exe(), "-v", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24",
           "-s", f"{width}x{height}", "-r", str(FPS), "-i", "pipe:"]  # fmt: skip
    if audio is not None:
        wav = path.with_suffix(".input.wav")
        sf.write(wav, audio, SR)
        cmd += ["-i", str(wav), "-c:a", "aac", "-shortest"]
    cmd += ["-c:v", "libx264", "-preset", "ultrafast", "-crf", str(crf), "-g", str(gop), "-pix_fmt", "yuv420p", str(path)]
    subprocess.run(cmd, input=frames.tobytes(), check=True)
    return path


def write_wav(path: Path, audio: np.ndarray) -> Path:
    sf.write(path, audio, SR)
    return path


def write_png(path: Path, rgb: np.ndarray) -> Path:
    Image.fromarray(rgb).save(path)
    return path
