"""What the face does in one frame (``FacePose``) and the prompt-driven behaviour of a whole clip (``Style``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class FacePose:
    """One frame's expression and head pose.

    ``dx``/``dy`` are head translations as fractions of the image size, ``roll`` is the in-plane rotation (radians,
    positive: clockwise on screen), ``yaw`` shifts the inner features horizontally as if the head turned (positive:
    towards the viewer's right; -1..1), ``pitch`` shifts them vertically (positive: down, a nod), ``gaze`` moves the
    irises (same sign as yaw). ``mouth_open`` 0 closed .. 1 wide open, ``mouth_width`` 0.6..1.3 relative to rest,
    ``smile`` -1 (frown) .. 1, ``blink`` 0 open .. 1 shut, ``brow_raise`` -1 (frown) .. 1 (raised).
    """

    dx: float = 0.0
    dy: float = 0.0
    roll: float = 0.0
    yaw: float = 0.0
    pitch: float = 0.0
    gaze: float = 0.0
    mouth_open: float = 0.0
    mouth_width: float = 1.0
    smile: float = 0.0
    blink: float = 0.0
    brow_raise: float = 0.0


NEUTRAL = FacePose()


@dataclass(frozen=True)
class Style:
    """Clip-level behaviour a prompt asks for; ``motion_track`` adds these offsets and gains to its random motion."""

    smile: float = 0.0  # baseline smile
    brow: float = 0.0  # baseline brow raise
    gaze: float = 0.0  # baseline yaw/gaze (negative: viewer's left)
    nod: float = 0.0  # amplitude of extra nodding (pitch), 0..1
    motion: float = 1.0  # gain on random head motion
    eye_wide: float = 0.0  # negative blink: eyes opened wider (surprised)


# Each prompt word adjusts the style; unknown words are ignored. Keys are matched as whole words or phrases.
_PROMPT_WORDS: dict[str, dict[str, float]] = {
    "smiling": {"smile": 0.7}, "smile": {"smile": 0.7}, "happy": {"smile": 0.6, "brow": 0.15},
    "cheerful": {"smile": 0.6, "motion": 1.2},
    "serious": {"smile": -0.3, "brow": -0.4, "motion": 0.7}, "sad": {"smile": -0.6, "brow": -0.2},
    "angry": {"smile": -0.5, "brow": -0.8},
    "nodding": {"nod": 1.0}, "nods": {"nod": 1.0},
    "looking left": {"gaze": -0.7}, "looking right": {"gaze": 0.7},
    "surprised": {"brow": 0.9, "eye_wide": 0.4}, "excited": {"brow": 0.4, "smile": 0.4, "motion": 1.4},
    "calm": {"motion": 0.5}, "still": {"motion": 0.3}, "relaxed": {"motion": 0.6, "smile": 0.2},
    "energetic": {"motion": 1.6},
}
_ADDITIVE = ("smile", "brow", "gaze", "nod", "eye_wide")


def style_from_prompt(prompt: str) -> Style:
    """The style a free-text prompt asks for ("smiling, nodding, looking left"); words it does not know do nothing."""
    text = " ".join(re.findall(r"[a-z]+", prompt.lower()))
    style = Style()
    for phrase, changes in _PROMPT_WORDS.items():
        if re.search(rf"\b{phrase}\b", text):
            style = replace(
                style,
                **{k: (getattr(style, k) + v if k in _ADDITIVE else getattr(style, k) * v) for k, v in changes.items()},
            )
    return replace(style, smile=max(-1.0, min(1.0, style.smile)), brow=max(-1.0, min(1.0, style.brow)),
                   gaze=max(-1.0, min(1.0, style.gaze)), nod=min(1.0, style.nod))
