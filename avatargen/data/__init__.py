"""Synthetic talking-avatar data: procedural cartoon people, driving speech, and per-frame ground truth.

Identity seeds < 100_000 are the training pool; seeds >= 1_000_000 are held out for examples and evaluation.
"""

from avatargen.data.examples import TalkingClip, make_clip, render_clip_frames
from avatargen.data.identity import Identity, identity_from_seed, sample_identity
from avatargen.data.motion import audio_envelope, motion_track
from avatargen.data.pose import FacePose, Style, style_from_prompt
from avatargen.data.render import FaceRenderer, MouthBox

__all__ = [
    "FacePose", "FaceRenderer", "Identity", "MouthBox", "Style", "TalkingClip", "audio_envelope", "identity_from_seed",
    "make_clip", "motion_track", "render_clip_frames", "sample_identity", "style_from_prompt",
]
