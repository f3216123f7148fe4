"""A second opinion on lip sync that needs no face: the image region whose brightness best follows the audio.

This is the evaluator's earlier measure, kept beside the mouth-opening one (``sync.py``) because it still works
where the detector finds no face. The 64x64 gray frame is split into an 8x8 grid of cells plus every 2x2 block of
cells (113 regions); each region's mean brightness is correlated with the loudness envelope (both high-passed over
1 s) at lags -10..+10, with a free sign (an open mouth may be a dark cavity or bright teeth). The best region and
sign over 113 x 21 hypotheses also fits unrelated motion, which is why, on its own, it reported offsets of +8 and
-10 frames on in-sync renders and on silence. Here it is held to the same rule as the main measure: its offset is
given only when its confidence (peak minus median correlation over lags) beats the best the same search reaches
against the audio shifted far out of sync (``CHANCE_SHIFTS`` shifts) by ``CHANCE_MARGIN``.
"""

from __future__ import annotations

import numpy as np

from avatargen.eval.sync import MAX_LAG, MIN_FRAMES, SILENCE_RMS, audio_envelope

GRID = 8
MIN_MOTION = 0.25  # gray levels: a region whose high-passed brightness varies less is static (codec noise)
CHANCE_SHIFTS = 12
CHANCE_MARGIN = 0.05
_TINY = 1e-8


def frame_cells(gray: np.ndarray) -> np.ndarray:
    """Mean of each grid cell of one (S, S) gray frame -> (GRID, GRID) float32."""
    side = gray.shape[0] // GRID
    return gray[: side * GRID, : side * GRID].reshape(GRID, side, GRID, side).mean(axis=(1, 3))


def measure_region_sync(cells: np.ndarray, rms: np.ndarray, fps: float) -> dict:
    """``cells``: (T, GRID, GRID) per frame; ``rms``: (T,) audio RMS per frame. Returns the ``sync_region_*`` keys."""
    n = len(cells)
    result: dict = {"sync_region_offset": None, "sync_region_confidence": None, "sync_region_chance_max": None}
    if n < MIN_FRAMES or float(rms.max(initial=0.0)) < SILENCE_RMS:
        return result
    signals = [cells[:, r, c] for r in range(GRID) for c in range(GRID)]
    signals += [cells[:, r : r + 2, c : c + 2].mean(axis=(1, 2)) for r in range(GRID - 1) for c in range(GRID - 1)]
    window = max(3, int(round(fps)) | 1)
    video = _highpass(np.stack(signals, axis=1).astype(np.float64), window)  # (T, 113)
    audio = _highpass(audio_envelope(rms)[:, None], window)[:, 0]  # (T,)
    video = video[:, video.std(axis=0) > MIN_MOTION]
    if video.shape[1] == 0:
        result["sync_region_confidence"] = 0.0
        return result
    lags = np.arange(-MAX_LAG, MAX_LAG + 1)
    curve = _best_curve(video, audio, lags)
    shifts = np.linspace(0.2, 0.8, CHANCE_SHIFTS) * n
    chance = max(_confidence(_best_curve(video, np.roll(audio, int(s)), lags)) for s in shifts)
    confidence = _confidence(curve)
    result.update(sync_region_confidence=round(confidence, 4), sync_region_chance_max=round(chance, 4))
    if confidence >= chance + CHANCE_MARGIN:
        result["sync_region_offset"] = int(lags[int(np.argmax(curve))])
    return result


def _best_curve(video: np.ndarray, audio: np.ndarray, lags: np.ndarray) -> np.ndarray:
    """The lag curve (L,) of the column with the strongest correlation of either sign, flipped to peak positive."""
    curves = _lag_correlations(video, audio, lags)  # (L, C)
    best = int(np.argmax(np.abs(curves).max(axis=0)))
    curve = curves[:, best]
    return curve * (np.sign(curve[np.argmax(np.abs(curve))]) or 1.0)


def _confidence(curve: np.ndarray) -> float:
    return float(curve.max() - np.median(curve))


def _highpass(x: np.ndarray, window: int) -> np.ndarray:
    pad = window // 2
    padded = np.pad(x, ((pad, pad), (0, 0)), mode="edge")
    sums = np.concatenate([np.zeros((1, x.shape[1])), np.cumsum(padded, axis=0)])
    return x - (sums[window:] - sums[:-window]) / window


def _lag_correlations(video: np.ndarray, audio: np.ndarray, lags: np.ndarray) -> np.ndarray:
    """Pearson correlation of each column of ``video`` (T, C) with ``audio`` (T,) at each lag -> (L, C)."""
    n = len(audio)
    out = np.zeros((len(lags), video.shape[1]))
    for i, lag in enumerate(lags):
        v = video[lag:] if lag >= 0 else video[: n + lag]
        a = audio[: n - lag] if lag >= 0 else audio[-lag:]
        v, a = v - v.mean(axis=0), a - a.mean()
        v_norm, a_norm = np.sqrt((v * v).sum(axis=0)), np.sqrt((a * a).sum())
        if a_norm > _TINY:
            out[i] = np.where(v_norm > _TINY, (a @ v) / np.maximum(v_norm * a_norm, _TINY), 0.0)
    return out
