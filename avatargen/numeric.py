"""Numeric helpers shared by the face and compositing code."""

from __future__ import annotations

import numpy as np


def column_median(values: np.ndarray) -> np.ndarray:
    """``np.median(values, axis=0)`` of an (N, C) array, bit for bit (float input keeps its dtype, integer input
    gives float64; N >= 1, no NaN), without the import of ``numpy.ma`` that ``np.median``'s first call makes: 13 ms
    of a render's time to first frame."""
    if not np.issubdtype(values.dtype, np.floating):
        values = values.astype(np.float64)
    count = len(values)
    half = count // 2
    if count % 2:
        return np.partition(values, half, axis=0)[half]
    middle = np.partition(values, [half - 1, half], axis=0)
    return (middle[half - 1] + middle[half]) / values.dtype.type(2)
