"""Blinks from the face track (``face_track.py``).

``blinks_per_min``: dips of eye openness under its running median (over 2 s) that last ``MIN_BLINK_S..MAX_BLINK_S``
seconds (at least a frame; a lone frame the face chip misplaced is not a blink), per minute of video with a face; a
dip counts from ``BLINK_MIN_DROP`` under the median, or ``BLINK_NOISE`` times the openness's own noise where that is
more (a robust spread of its ratio to the median). A cartoon's drawn blink drops the openness by half; a
photograph's lid, its lashes and creases kept, by 15-18 % (its noise 0.8 %). People blink about 15-20 times a
minute; 0 on a long clip is a frozen stare.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from avatargen.eval.context import EvalContext, Frame
from avatargen.eval.face_track import TrackedFace
from avatargen.eval.metric import Metric, Rows

BLINK_MIN_DROP, BLINK_NOISE = 0.1, 6.0
MIN_BLINK_S, MAX_BLINK_S = 0.06, 0.5


def measure_blinks(eyes: np.ndarray, fps: float) -> dict:
    """``eyes``: (T,) eye openness, NaN where no face."""
    found = np.isfinite(eyes)
    minutes = found.sum() / fps / 60.0
    if found.sum() < 2 * fps:
        return {"blinks_per_min": None, "blinks": None}
    frames = np.arange(len(eyes))
    filled = np.interp(frames, frames[found], eyes[found])
    half = int(fps)
    padded = np.pad(filled, half, mode="edge")
    running = np.array([np.median(padded[t : t + 2 * half + 1]) for t in range(len(filled))])
    ratio = filled / np.maximum(running, 1e-9)
    noise = 1.4826 * float(np.median(np.abs(ratio - np.median(ratio))))  # the spread of a normal law's, robustly
    closed = ratio < 1.0 - max(BLINK_MIN_DROP, BLINK_NOISE * noise)
    edges = np.diff(np.concatenate([[0], closed.astype(np.int8), [0]]))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    shortest = max(1, int(round(MIN_BLINK_S * fps)))  # 2 frames at 25 fps
    count = int(np.sum(((ends - starts) >= shortest) & ((ends - starts) <= MAX_BLINK_S * fps)))
    return {"blinks": count, "blinks_per_min": round(count / minutes, 2)}


class Blinks(Metric):
    """``blinks`` and ``blinks_per_min``."""

    def __init__(self, context: EvalContext) -> None:
        self.fps = context.fps
        self.eyes: list[float] = []  # openness, NaN without a face

    def update(self, frame: Frame, face: TrackedFace | None) -> None:
        self.eyes.append(np.nan if face is None else face.eyes)

    def summary(self) -> dict[str, Any]:
        return measure_blinks(np.asarray(self.eyes, float), self.fps)

    @staticmethod
    def rows(result: dict[str, Any]) -> Rows:
        if result.get("blinks_per_min") is None:
            return []
        return [("blinks", f"{result['blinks_per_min']:.0f} per minute ({result['blinks']} in all)")]
