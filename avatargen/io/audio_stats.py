"""Sums over an audio track (``TrackStats``): its mean and variance without holding it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TrackStats:
    """Sums over every sample of one audio track (float64): its mean and variance without holding it."""

    samples: int
    total: float
    total_squares: float

    @property
    def mean(self) -> float:
        return self.total / max(1, self.samples)

    @property
    def variance(self) -> float:
        return max(0.0, self.total_squares / max(1, self.samples) - self.mean**2)

    def padded(self, samples: int) -> "TrackStats":
        """The statistics of this track followed (or preceded) by silence up to ``samples`` samples."""
        return TrackStats(max(samples, self.samples), self.total, self.total_squares)

    @classmethod
    def of(cls, samples: np.ndarray) -> "TrackStats":
        x = np.asarray(samples, dtype=np.float64).reshape(-1)
        return cls(x.size, float(x.sum()), float(np.dot(x, x)))

    def __add__(self, other: "TrackStats") -> "TrackStats":
        return TrackStats(self.samples + other.samples, self.total + other.total,
                          self.total_squares + other.total_squares)  # fmt: skip
