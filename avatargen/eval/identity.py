"""Identity drift without a face detector: how much the face region still looks like the reference, over time.

The face region is a fixed box of the frame (default: the central 60 %, where a talking-head video keeps the
face). Per frame, similarity to the reference's same box is the mean of two terms in [0, 1]:

- structure: cosine similarity of the two patches after subtracting each channel's mean (features, shading; blind to
  a global colour change, and clipped at 0);
- colour: histogram intersection of the per-channel 16-bin (soft-binned) histograms (the fraction of pixel mass
  whose colour still matches; drops when skin tone or lighting drifts).

``identity_ratio`` compares the end of the video with its start (see ``summarize_identity``), so a model that
stays as faithful as it began scores 1 whatever its absolute similarity.
"""

from __future__ import annotations

import numpy as np

DEFAULT_FACE_BOX = (0.2, 0.2, 0.8, 0.8)  # (x0, y0, x1, y1) as fractions of the frame
HIST_BINS = 16
WINDOW_S = 60.0  # compare the first and last minute of long videos
SHORT_FRACTION = 0.1  # ... and the first and last 10 % of frames of videos shorter than 2 windows


class IdentityTracker:
    """Similarity of each frame's face box to a reference image's face box (both analysis-size RGB, 0..255)."""

    def __init__(self, reference: np.ndarray, face_box: tuple[float, float, float, float] = DEFAULT_FACE_BOX) -> None:
        x0, y0, x1, y1 = face_box
        if not (0.0 <= x0 < x1 <= 1.0 and 0.0 <= y0 < y1 <= 1.0):
            raise ValueError(f"face_box must be fractions x0 < x1, y0 < y1 in [0, 1], got {face_box}")
        self.face_box = face_box
        self._ref_centred, self._ref_hist = self._features(reference)

    def similarity(self, frame: np.ndarray) -> float:
        """Similarity in [0, 1] of one (S, S, 3) frame to the reference (1 = the same image)."""
        centred, hist = self._features(frame)
        norms = np.linalg.norm(centred) * np.linalg.norm(self._ref_centred)
        # Two flat patches have no structure to compare: treat as equal rather than dividing by zero.
        structure = float(centred.ravel() @ self._ref_centred.ravel() / norms) if norms > 1e-6 else 1.0
        colour = float(np.minimum(hist, self._ref_hist).sum(axis=1).mean())
        return 0.5 * max(structure, 0.0) + 0.5 * colour

    def _features(self, frame: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        size = frame.shape[0]
        x0, y0, x1, y1 = (round(f * size) for f in self.face_box)
        patch = frame[y0:y1, x0:x1].reshape(-1, 3)  # (P, 3)
        centred = patch - patch.mean(axis=0)  # (P, 3)
        return centred, _soft_histogram(patch)


def _soft_histogram(patch: np.ndarray) -> np.ndarray:
    """Per-channel histograms of ``patch`` (P, 3) -> (3, HIST_BINS), summing to 1 per channel.

    Each value is shared between its two nearest bin centres in proportion to closeness, so the colour term falls
    smoothly as colours drift instead of jumping when a flat skin tone crosses a bin edge.
    """
    position = np.clip(patch * (HIST_BINS / 256.0) - 0.5, 0.0, HIST_BINS - 1.0)  # (P, 3), in bin-centre units
    low = np.minimum(position.astype(np.int64), HIST_BINS - 2)  # (P, 3)
    upper_weight = position - low  # (P, 3)
    hist = np.stack([
        np.bincount(low[:, c], 1.0 - upper_weight[:, c], HIST_BINS)
        + np.bincount(low[:, c] + 1, upper_weight[:, c], HIST_BINS)
        for c in range(3)
    ])  # fmt: skip
    return hist / len(patch)


def summarize_identity(similarities: np.ndarray, fps: float) -> dict:
    """``identity_start`` / ``identity_end``: mean similarity over the first / last minute (the first / last 10 % of
    frames when the video is shorter than 2 minutes); ``identity_ratio`` = end / start (1 = no drift, < 1 = drift).
    """
    n = len(similarities)
    window = int(round(WINDOW_S * fps))
    span = window if n >= 2 * window else max(1, int(round(SHORT_FRACTION * n)))
    start = float(np.mean(similarities[:span]))
    end = float(np.mean(similarities[-span:]))
    return {
        "identity_start": round(start, 4),
        "identity_end": round(end, 4),
        "identity_ratio": round(end / start, 4) if start > 1e-6 else None,
        "identity_window_frames": span,
    }
