"""Head motion and blinks from the face track (``face_track.py``).

``head_motion_px``: mean movement of the face (the centroid of its five landmarks) from one frame to the next, in
pixels of the analysed frame; ``head_range_px``: the spread of its position (95th minus 5th percentile, the larger
of x and y). ``blinks_per_min``: dips of eye openness below ``BLINK_DROP`` x its running median (over 2 s) that last
``1..MAX_BLINK_S`` seconds, per minute of video with a face. People blink about 15-20 times a minute; 0 on a long
clip is a frozen stare.
"""

from __future__ import annotations

import numpy as np

BLINK_DROP = 0.6
MAX_BLINK_S = 0.5


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
    closed = filled < BLINK_DROP * running
    edges = np.diff(np.concatenate([[0], closed.astype(np.int8), [0]]))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    count = int(np.sum((ends - starts) <= MAX_BLINK_S * fps))
    return {"blinks": count, "blinks_per_min": round(count / minutes, 2)}
