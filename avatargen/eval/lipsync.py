"""Lip sync without landmarks: find the image region whose brightness follows the audio, and the lag of the best fit.

Signals. Mouth *openness* follows the loudness envelope, and a cell's mean brightness follows openness (an open
mouth shows a dark cavity, or bright teeth), so we correlate each cell's mean brightness with the audio envelope:
both are levels, the relation is linear up to a sign, and each syllable gives one bump in each signal. (Motion
energy |dx/dt| would pair with |d envelope/dt| instead: rectified derivatives give two bumps per syllable, opening
and closing, which blurs the lag peak.) The sign is free per cell, so a cell is scored by its strongest
correlation of either sign and its curve is flipped to make that peak positive. Both signals are high-passed by
subtracting a 1-second moving average, which removes slow lighting changes and head drift but keeps syllables
(2-8 Hz).

Regions. The analysis frame (64x64) is split into an 8x8 grid of cells, plus every 2x2 block of cells, so a mouth
on a cell border is still covered: 64 + 49 candidates, each correlated with the envelope over the same lags.

Conventions. ``offset_frames`` is the lag of the peak; positive means the video lags the audio (the mouth moves
``offset_frames`` frames after the sound), so delaying the audio track by k frames moves the offset by -k.
``sync_confidence`` is the peak correlation minus the median correlation over all lags (as SyncNet's confidence):
0 when nothing moves, up to about 1 for a mouth that follows the audio closely. Because the best of 113 regions
and 21 lags is taken, unrelated motion (grain, head sway) also scores above 0 on short videos (about 0.2 at 300
frames, shrinking as 1/sqrt(frames)); ``sync_chance`` measures that floor for the video at hand by running the same
search against the audio shifted far out of sync, so read the confidence against it.
"""

from __future__ import annotations

import numpy as np

GRID = 8  # cells per side of the analysis frame
MAX_LAG = 10  # frames each way (0.4 s at 25 fps): wider than any real A/V offset worth reporting
MIN_FRAMES = 2 * MAX_LAG + 30  # below this the overlap at the extreme lags is too short to trust a correlation
DB_RANGE = 40.0  # envelope floor below its loud level: pauses sit at the floor instead of at -inf
MIN_MOTION = 0.25  # gray levels (0..255): a cell whose high-passed brightness varies less is static (codec noise)
CHANCE_SHIFTS = 5  # out-of-sync audio shifts averaged for ``sync_chance``
_TINY = 1e-8


def frame_cells(frame: np.ndarray) -> np.ndarray:
    """Mean gray level of each grid cell of one (S, S, 3) analysis frame -> (GRID, GRID) float32."""
    gray = frame @ np.array([0.299, 0.587, 0.114], dtype=np.float32)  # (S, S)
    side = gray.shape[0] // GRID
    gray = gray[: side * GRID, : side * GRID]
    return gray.reshape(GRID, side, GRID, side).mean(axis=(1, 3))  # (GRID, GRID)


def audio_envelope(audio: np.ndarray, sample_rate: int, fps: float, n_frames: int) -> np.ndarray:
    """Loudness per video frame in dB relative to the loud level (99th percentile), floored at -DB_RANGE -> (n_frames,).

    Frame i shows the instant i / fps, so its window is the 1/fps of audio centred there. Frames past the end of
    the audio get the floor.
    """
    hop = sample_rate / fps
    centres = np.arange(n_frames) * hop
    starts = np.clip(np.round(centres - hop / 2).astype(np.int64), 0, len(audio))
    ends = np.clip(np.round(centres + hop / 2).astype(np.int64), 0, len(audio))
    energy = np.concatenate([[0.0], np.cumsum(audio.astype(np.float64) ** 2)])
    rms = np.sqrt((energy[ends] - energy[starts]) / np.maximum(ends - starts, 1))
    loud = np.percentile(rms, 99) if len(rms) else 0.0
    if loud <= 0.0:
        return np.zeros(n_frames)  # silence: no envelope to follow, every correlation comes out 0
    floor = loud * 10 ** (-DB_RANGE / 20)
    return 20 * np.log10(np.maximum(rms, floor) / loud)


def measure_lipsync(cells: np.ndarray, envelope: np.ndarray, fps: float, frame_size: tuple[int, int]) -> dict:
    """Find the region that moves with the audio and the A/V offset.

    ``cells``: (T, GRID, GRID) mean gray per cell and frame (``frame_cells``); ``envelope``: (T,) from
    ``audio_envelope``; ``frame_size``: (width, height) of the video, to report the box in its pixels.
    Returns ``offset_frames`` (int, positive = video lags audio), ``sync_confidence`` (peak minus median correlation),
    ``sync_peak`` (the peak correlation), ``sync_chance`` (the confidence the same search reaches against
    out-of-sync audio), ``sync_curve`` (correlation per lag, -MAX_LAG..MAX_LAG), ``sync_max_lag``
    and ``mouth_box`` ([x0, y0, x1, y1] in video pixels). With fewer than MIN_FRAMES frames the sync keys are None;
    when no region moves at all (a still image) the confidence is 0.0 and offset, curve and box are None.
    """
    n = len(cells)
    result: dict = {"offset_frames": None, "sync_confidence": None, "sync_peak": None, "sync_chance": None,
                    "sync_curve": None, "sync_max_lag": MAX_LAG, "mouth_box": None}  # fmt: skip
    if n < MIN_FRAMES:
        result["sync_note"] = f"too short for lip sync: {n} frames, need {MIN_FRAMES}"
        return result

    merged = (cells[:, :-1, :-1] + cells[:, 1:, :-1] + cells[:, :-1, 1:] + cells[:, 1:, 1:]) / 4  # (T, G-1, G-1)
    signals = np.concatenate([cells.reshape(n, -1), merged.reshape(n, -1)], axis=1).astype(np.float64)  # (T, C)
    boxes = [(r, c, 1) for r in range(GRID) for c in range(GRID)]
    boxes += [(r, c, 2) for r in range(GRID - 1) for c in range(GRID - 1)]  # (row, col, span) in cells

    window = max(3, int(round(fps)) | 1)  # odd, about one second
    video = _highpass(signals, window)  # (T, C)
    audio = _highpass(envelope.astype(np.float64)[:, None], window)[:, 0]  # (T,)
    moving = video.std(axis=0) > MIN_MOTION  # (C,)
    if not moving.any():
        result["sync_confidence"] = result["sync_chance"] = 0.0
        result["sync_note"] = "no image region moves"
        return result

    lags = np.arange(-MAX_LAG, MAX_LAG + 1)
    best, curve = _best_region(video[:, moving], audio, lags)
    peak_index = int(np.argmax(curve))
    # The same search against the audio circularly shifted far out of sync: what this video scores by chance.
    shifts = np.linspace(0.2, 0.8, CHANCE_SHIFTS) * n
    chance = [_confidence(_best_region(video[:, moving], np.roll(audio, int(s)), lags)[1]) for s in shifts]

    row, col, span = boxes[int(np.flatnonzero(moving)[best])]
    width, height = frame_size
    result.update(
        offset_frames=int(lags[peak_index]),
        sync_confidence=round(_confidence(curve), 4),
        sync_chance=round(float(np.mean(chance)), 4),
        sync_peak=round(float(curve[peak_index]), 4),
        sync_curve=[round(float(c), 4) for c in curve],
        mouth_box=[round(col * width / GRID), round(row * height / GRID),
                   round((col + span) * width / GRID), round((row + span) * height / GRID)],
    )  # fmt: skip
    return result


def _best_region(video: np.ndarray, audio: np.ndarray, lags: np.ndarray) -> tuple[int, np.ndarray]:
    """The column of ``video`` (T, C) with the strongest correlation of either sign at any lag, and its curve (L,)
    flipped so that this peak is positive."""
    curves = _lag_correlations(video, audio, lags)  # (L, C)
    best = int(np.argmax(np.abs(curves).max(axis=0)))
    curve = curves[:, best]
    return best, curve * (np.sign(curve[np.argmax(np.abs(curve))]) or 1.0)


def _confidence(curve: np.ndarray) -> float:
    """Peak minus median correlation over lags (SyncNet's confidence)."""
    return float(curve.max() - np.median(curve))


def _highpass(x: np.ndarray, window: int) -> np.ndarray:
    """``x`` (T, C) minus its centred moving average over ``window`` frames (edges padded with the edge value)."""
    pad = window // 2
    padded = np.pad(x, ((pad, pad), (0, 0)), mode="edge")  # (T + 2 pad, C)
    sums = np.concatenate([np.zeros((1, x.shape[1])), np.cumsum(padded, axis=0)])  # (T + 2 pad + 1, C)
    return x - (sums[window:] - sums[:-window]) / window


def _lag_correlations(video: np.ndarray, audio: np.ndarray, lags: np.ndarray) -> np.ndarray:
    """Pearson correlation of each column of ``video`` (T, C) with ``audio`` (T,) shifted by each lag -> (L, C).

    At lag L video frame t is paired with audio frame t - L, over the frames where both exist. A constant segment
    (no variance) correlates 0 rather than dividing by zero.
    """
    n = len(audio)
    out = np.zeros((len(lags), video.shape[1]))
    for i, lag in enumerate(lags):
        v = video[lag:] if lag >= 0 else video[: n + lag]  # (T - |L|, C)
        a = audio[: n - lag] if lag >= 0 else audio[-lag:]  # (T - |L|,)
        v = v - v.mean(axis=0)
        a = a - a.mean()
        v_norm = np.sqrt((v * v).sum(axis=0))
        a_norm = np.sqrt((a * a).sum())
        if a_norm < _TINY:
            continue
        out[i] = np.where(v_norm > _TINY, (a @ v) / np.maximum(v_norm * a_norm, _TINY), 0.0)
    return out
