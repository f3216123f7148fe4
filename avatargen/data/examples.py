"""The dataset API of the training recipe: one synthetic talking clip (reference, audio, frames, ground truth).

Splits: identity seeds < 100_000 are the training pool; seeds >= 1_000_000 are held out for examples and evaluation
(never train on them). A clip is a pure function of (identity_seed, clip_seed, arguments) given the same espeak-ng.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from avatargen.data.identity import identity_from_seed
from avatargen.data.motion import audio_envelope, motion_track, num_frames
from avatargen.data.pose import NEUTRAL, FacePose, style_from_prompt
from avatargen.data.render import FaceRenderer
from avatargen.data.speech import driving_audio

TRAIN_SEEDS_END = 100_000
HELDOUT_SEEDS_START = 1_000_000

PROMPTS = (
    "", "", "smiling", "serious", "nodding", "looking left", "looking right", "surprised", "calm",
    "smiling and nodding", "calm, looking left", "serious, looking right", "a cheerful person talking",
    "surprised and excited", "relaxed smile", "a calm news presenter",
)


@dataclass
class TalkingClip:
    """One training example: frames[t] shows the identity saying audio[t/fps : (t+1)/fps]."""

    reference: np.ndarray  # (H, W, 3) uint8: neutral pose, mouth closed, eyes open
    audio: np.ndarray  # (S,) float32 at sample_rate
    frames: np.ndarray  # (T, H, W, 3) uint8, T = round(S / sample_rate * fps)
    mouth_boxes: np.ndarray  # (T, 4) int64: x0, y0, x1, y1 (exclusive) pixel box of the mouth
    openness: np.ndarray  # (T,) float32: ground-truth mouth opening in [0, 1]
    prompt: str
    identity_seed: int
    sample_rate: int = 16000
    fps: int = 25


def clip_plan(identity_seed: int, clip_seed: int, seconds: float, sample_rate: int = 16000, fps: int = 25,
              prompt: str | None = None, prefer_espeak: bool = True) -> tuple[np.ndarray, list[FacePose], str]:
    """The audio, the per-frame poses and the prompt of a clip, without rendering anything."""
    rng = np.random.default_rng([int(identity_seed), int(clip_seed), 0xC11B])
    if prompt is None:
        prompt = PROMPTS[int(rng.integers(len(PROMPTS)))]
    audio = driving_audio(rng, seconds, sample_rate, prefer_espeak=prefer_espeak)
    env = audio_envelope(audio, sample_rate, fps)
    poses = motion_track(env, fps, style_from_prompt(prompt), rng)
    assert len(poses) == num_frames(len(audio), sample_rate, fps)
    return audio, poses, prompt


def render_clip_frames(renderer: FaceRenderer, poses: list[FacePose]) -> Iterator[tuple[np.ndarray, tuple]]:
    """Frames one by one (constant memory for any length): yields (frame (H, W, 3) uint8, mouth box)."""
    for pose in poses:
        yield renderer.render(pose)


def make_clip(identity_seed: int, clip_seed: int, seconds: float, size: int = 256, fps: int = 25,
              sample_rate: int = 16000, prompt: str | None = None, prefer_espeak: bool = True) -> TalkingClip:
    """A whole clip in memory; ``prompt=None`` picks one from ``PROMPTS`` (sometimes empty)."""
    audio, poses, prompt = clip_plan(identity_seed, clip_seed, seconds, sample_rate, fps, prompt, prefer_espeak)
    renderer = FaceRenderer(identity_from_seed(identity_seed), size)
    frames = np.empty((len(poses), size, size, 3), np.uint8)
    boxes = np.empty((len(poses), 4), np.int64)
    for t, (frame, box) in enumerate(render_clip_frames(renderer, poses)):
        frames[t], boxes[t] = frame, box
    return TalkingClip(
        reference=renderer.render(NEUTRAL)[0].copy(), audio=audio, frames=frames, mouth_boxes=boxes,
        openness=np.array([p.mouth_open for p in poses], np.float32), prompt=prompt,
        identity_seed=int(identity_seed), sample_rate=sample_rate, fps=fps,
    )


def write_ground_truth_video(identity_seed: int, audio_path, output, size: int = 256, fps: int = 25,
                             sample_rate: int = 16000, prompt: str = "", seed: int = 0) -> int:
    """The generator's own talking video of ``identity_seed`` driven by any audio file, as an MP4 with that audio.

    This is the reference a trained model is measured against (same identity, same audio). Returns the frame count.
    """
    from avatargen.io.audio import load_audio
    from avatargen.io.encoder import Encoder

    audio = load_audio(audio_path, sample_rate)
    rng = np.random.default_rng([int(identity_seed), int(seed), 0x67])
    poses = motion_track(audio_envelope(audio, sample_rate, fps), fps, style_from_prompt(prompt), rng)
    renderer = FaceRenderer(identity_from_seed(identity_seed), size)
    with Encoder(output, size, size, fps, audio_path) as writer:
        for frame, _ in render_clip_frames(renderer, poses):
            writer.write(frame)
    return len(poses)
