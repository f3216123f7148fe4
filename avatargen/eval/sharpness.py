"""Sharpness of the face relative to the reference: detail a viewer sees in the face, not in the background.

Measure: the variance of the 4-neighbour Laplacian of the gray face chip (the face aligned by its five landmarks
and resampled to 150x150, ``face_track.chip_measures``), so faces of any size in any frame are compared at the same
scale. ``sharpness`` is the median over frames with a face divided by the reference image's: 1 = as detailed as the
reference, 0.2 = a fifth of its fine detail (blurred, smeared or over-compressed).
"""

from __future__ import annotations

import numpy as np


def measure_sharpness(per_frame: np.ndarray, reference: float | None) -> dict:
    """``per_frame``: (T,) Laplacian variance, NaN where no face; ``reference``: the reference chip's, or None."""
    found = per_frame[np.isfinite(per_frame)]
    if len(found) == 0:
        return {"sharpness": None, "sharpness_video": None, "sharpness_reference": reference}
    video = float(np.median(found))
    ratio = round(video / reference, 4) if reference else None
    return {"sharpness": ratio, "sharpness_video": round(video, 2),
            "sharpness_reference": round(reference, 2) if reference else None}  # fmt: skip
