"""Head motion from the face track (``face_track.py``).

``head_motion_px``: mean movement of the face (the centroid of its five landmarks) from one frame to the next, in
pixels of the analysed frame; ``head_range_px``: the spread of its position (95th minus 5th percentile, the larger
of x and y).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from avatargen.eval.context import EvalContext, Frame
from avatargen.eval.face_track import TrackedFace
from avatargen.eval.metric import Metric, Rows


def measure_head_motion(centre: np.ndarray, fps: float) -> dict:
    """``centre``: (T, 2) pixels, NaN where no face."""
    found = np.isfinite(centre).all(axis=1)
    if found.sum() < 2:
        return {"head_motion_px": None, "head_range_px": None}
    steps = np.linalg.norm(np.diff(centre, axis=0), axis=1)  # (T - 1,), NaN across gaps
    steps = steps[np.isfinite(steps)]
    spread = np.percentile(centre[found], 95, axis=0) - np.percentile(centre[found], 5, axis=0)
    return {"head_motion_px": round(float(steps.mean()), 3) if len(steps) else None,
            "head_range_px": round(float(spread.max()), 2)}  # fmt: skip


class HeadMotion(Metric):
    """``head_motion_px`` and ``head_range_px``."""

    def __init__(self, context: EvalContext) -> None:
        self.fps = context.fps
        self.centre: list[tuple[float, float]] = []  # NaN without a face

    def update(self, frame: Frame, face: TrackedFace | None) -> None:
        self.centre.append((np.nan, np.nan) if face is None else tuple(face.face.points.mean(axis=0)))

    def summary(self) -> dict[str, Any]:
        return measure_head_motion(np.asarray(self.centre, float).reshape(-1, 2), self.fps)

    @staticmethod
    def rows(result: dict[str, Any]) -> Rows:
        if result.get("head_motion_px") is None:
            return []
        return [("head motion", f"{result['head_motion_px']:.2f} px per frame, range {result['head_range_px']:.0f} px")]
