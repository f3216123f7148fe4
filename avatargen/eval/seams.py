"""Seam continuity: is the change across a chunk boundary larger than an ordinary frame-to-frame change?

A seam at frame s means frames s - 1 and s come from different chunks. ``frame_change`` measures the mean absolute
difference of consecutive analysis frames (RGB, gray levels 0..255); ``seam_ratio`` is the mean change at the seams
over the median change of every other frame pair. About 1: the seams cannot be told from ordinary motion; >> 1:
visible cuts.
"""

from __future__ import annotations

import numpy as np

from avatargen.errors import BadInputError

# Added to both sides of the ratio: changes below about half a gray level are invisible, and a static video (median
# change 0) must not turn an invisible seam into an infinite ratio.
CHANGE_FLOOR = 0.5


def frame_change(previous: np.ndarray, frame: np.ndarray) -> float:
    """Mean |frame - previous| over pixels and channels, in gray levels."""
    return float(np.abs(frame - previous).mean())


def measure_seams(changes: np.ndarray, seams: list[int]) -> dict:
    """``changes``: (T,) with changes[t] = change from frame t - 1 to t (changes[0] unused); ``seams``: frame indices.

    Returns ``seam_ratio`` (mean over seams), ``seam_ratios`` (one per seam, in the order given) and
    ``seam_change_median`` (the typical change the seams are compared with). Raises ``BadInputError`` for a seam
    outside 1..T-1.
    """
    n = len(changes)
    for s in seams:
        if not 1 <= s < n:
            raise BadInputError(f"seam {s} is outside the video's frames 1..{n - 1}; give seam frame indices")
    others = np.ones(n, dtype=bool)
    others[0] = False
    others[list(seams)] = False
    typical = float(np.median(changes[others])) if others.any() else 0.0
    ratios = [(float(changes[s]) + CHANGE_FLOOR) / (typical + CHANGE_FLOOR) for s in seams]
    return {
        "seam_ratio": round(float(np.mean(ratios)), 4) if ratios else None,
        "seam_ratios": [round(r, 4) for r in ratios],
        "seam_change_median": round(typical, 4),
    }
