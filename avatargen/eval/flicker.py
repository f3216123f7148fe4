"""Flicker: temporal high-frequency energy, the part of the change between frames that motion does not explain.

Per frame t, ``second_difference`` is the mean over pixels of |x[t+1] - 2 x[t] + x[t-1]| on the frames reduced to
64x64 gray (area averages), in gray levels (0..255 scale). Steady motion and slow drifts cancel in a second difference; a frame
that jumps away and back (brightness pumping, texture boiling) does not. ``flicker`` is its mean over the video:
0 for a static video; a brightness that alternates by +-d every frame scores about 4 d.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from avatargen.eval.context import EvalContext, Frame
from avatargen.eval.face_track import TrackedFace
from avatargen.eval.metric import Metric, Rows

SIDE = 64  # frames are compared reduced to this many pixels a side


def second_difference(before: np.ndarray, frame: np.ndarray, after: np.ndarray) -> float:
    """Mean |after - 2 frame + before| over pixels, in gray levels."""
    return float(np.abs(after - 2.0 * frame + before).mean())


def measure_flicker(second_differences: np.ndarray) -> dict:
    """``flicker``: mean second difference (0.0 for videos under 3 frames); ``flicker_p95``: its 95th percentile."""
    if len(second_differences) == 0:
        return {"flicker": 0.0, "flicker_p95": 0.0}
    return {
        "flicker": round(float(np.mean(second_differences)), 4),
        "flicker_p95": round(float(np.percentile(second_differences, 95)), 4),
    }


class Flicker(Metric):
    """``flicker`` and ``flicker_p95``: the second difference of every three consecutive frames."""

    def __init__(self, context: EvalContext) -> None:
        self.second_differences: list[float] = []
        self.before: np.ndarray | None = None
        self.previous: np.ndarray | None = None

    def update(self, frame: Frame, face: TrackedFace | None) -> None:
        small = frame.gray(SIDE)
        if self.before is not None:
            self.second_differences.append(second_difference(self.before, self.previous, small))
        self.before, self.previous = self.previous, small

    def summary(self) -> dict[str, Any]:
        return measure_flicker(np.asarray(self.second_differences))

    @staticmethod
    def rows(result: dict[str, Any]) -> Rows:
        return [("flicker", f"{result.get('flicker', 0.0):.2f} gray levels (0 = none), p95 "
                            f"{result.get('flicker_p95', 0.0):.2f}")]  # fmt: skip
