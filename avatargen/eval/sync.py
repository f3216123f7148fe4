"""Lip sync from the mouth: the lag at which the mouth opening (``face_track.py``) best follows the audio loudness,
and whether that is clearly better than chance on this very clip.

Signals: the loudness envelope in dB per video frame (``audio_envelope``) and the mouth opening per frame, both
high-passed by subtracting a 1-second moving average (removes slow lighting and head drift, keeps syllables).
Curve: Pearson correlation of the two at lags -``MAX_LAG``..+``MAX_LAG`` frames; an opening mouth goes with a
louder sound, so only positive correlation counts (no free sign, no free region: one hypothesis per lag).

``sync_confidence`` is the peak correlation. ``sync_chance`` is what the same search scores against the same audio
circularly shifted far out of sync (``CHANCE_SHIFTS`` shifts between 1 s and the clip length minus 1 s, less those
by which the audio repeats itself, as a looped clip does): its mean, ``sync_chance_sd`` their spread and
``sync_chance_max`` the best. ``offset_frames`` is given only when the peak beats the best out-of-sync score by
``CHANCE_MARGIN`` and stands ``MIN_CHANCE_Z`` spreads above their mean, which a chance peak does about once in 100
(a Gumbel law, the law of a best score, fitted to them). The best of 24 is itself only about 2 spreads above the
mean, so the margin alone let a mouth played with another sentence through (0.33 against 0.23 +- 0.04, best 0.28:
2.6 spreads, on 8 s of a render of avatar_1); mouths in sync stand 17-22 spreads above on 8-s renders, 3.7 on 4 s of
the model's own square of a photograph. Otherwise it is None and ``sync_note`` says why, as it does for silent
audio, a mouth that does not move, or too few frames with a face. Positive offset: the video lags the audio
(delaying the audio track by k frames moves the offset by -k).
"""

from __future__ import annotations

import numpy as np

MAX_LAG = 10  # frames each way (0.4 s at 25 fps): wider than any A/V offset worth reporting
MIN_FRAMES = 2 * MAX_LAG + 30  # below this the overlap at the extreme lags is too short to trust a correlation
DB_RANGE = 40.0  # envelope floor below the loud level: pauses sit at the floor instead of at -inf
SILENCE_RMS = 10 ** (-50 / 20)  # loudest frame quieter than -50 dBFS: the audio is silent, there is nothing to sync
CHANCE_SHIFTS = 24
REPEAT_CORRELATION = 0.5  # audio this correlated with itself shifted repeats there: that shift is in sync, not chance
CHANCE_MARGIN = 0.05  # correlation the peak must add to the best out-of-sync score to count as found
MIN_CHANCE_Z = 3.0  # ... and how many spreads of the out-of-sync scores it must stand above their mean
MIN_FACE_SHARE = 0.5  # frames with a face below this share: the mouth signal is too gappy to trust
MIN_MOUTH_MOTION = 1e-3  # std of the high-passed opening below this: the mouth does not move
_TINY = 1e-8


def frame_rms(audio: np.ndarray, sample_rate: int, fps: float, n_frames: int) -> np.ndarray:
    """RMS of the 1/fps of audio centred on each video frame -> (n_frames,) (0 past the end of the audio)."""
    hop = sample_rate / fps
    centres = np.arange(n_frames) * hop
    starts = np.clip(np.round(centres - hop / 2).astype(np.int64), 0, len(audio))
    ends = np.clip(np.round(centres + hop / 2).astype(np.int64), 0, len(audio))
    energy = np.concatenate([[0.0], np.cumsum(audio.astype(np.float64) ** 2)])
    return np.sqrt((energy[ends] - energy[starts]) / np.maximum(ends - starts, 1))


def audio_envelope(rms: np.ndarray) -> np.ndarray:
    """Loudness per frame in dB relative to the loud level (99th percentile), floored at -DB_RANGE."""
    loud = max(float(np.percentile(rms, 99)), _TINY)
    return np.maximum(20.0 * np.log10(np.maximum(rms, _TINY) / loud), -DB_RANGE)


def measure_sync(mouth: np.ndarray, rms: np.ndarray, fps: float) -> dict:
    """Sync of the mouth opening ``mouth`` (T,) (NaN: no face) with the per-frame audio RMS ``rms`` (T,)."""
    n = len(mouth)
    result: dict = {"offset_frames": None, "sync_confidence": None, "sync_chance": None, "sync_chance_sd": None,
                    "sync_chance_max": None, "sync_curve": None, "sync_max_lag": MAX_LAG,
                    "sync_note": None}  # fmt: skip
    if n < MIN_FRAMES:
        result["sync_note"] = f"video too short for lip sync ({n} frames, need {MIN_FRAMES})"
        return result
    if float(rms.max(initial=0.0)) < SILENCE_RMS:
        result["sync_note"] = "the audio is silent: nothing to sync to"
        return result
    found = np.isfinite(mouth)
    if found.mean() < MIN_FACE_SHARE:
        result["sync_note"] = f"a face in only {found.mean():.0%} of frames: too few to follow the mouth"
        return result
    frames = np.arange(n)
    filled = np.interp(frames, frames[found], mouth[found])  # short gaps bridged linearly
    window = max(3, int(round(fps)) | 1)  # odd, about one second
    video = _highpass(filled, window)
    audio = _highpass(audio_envelope(rms), window)
    if video.std() < MIN_MOUTH_MOTION:
        result.update(sync_confidence=0.0, sync_note="the mouth does not move")
        return result
    lags = np.arange(-MAX_LAG, MAX_LAG + 1)
    curve = _lag_correlations(video, audio, lags)
    shifts = np.linspace(fps, n - fps, CHANCE_SHIFTS).astype(int) if n > 3 * fps else np.linspace(n // 4, 3 * n // 4, CHANCE_SHIFTS).astype(int)
    # A shift by which the audio repeats itself (a looped clip) is not out of sync: it is left out of the chance level.
    shifted = [np.roll(audio, int(s)) for s in shifts]
    shifted = [a for a in shifted if _lag_correlations(audio, a, lags).max() < REPEAT_CORRELATION]
    peak = int(np.argmax(curve))
    confidence = float(curve[peak])
    result.update(sync_confidence=round(confidence, 4), sync_curve=[round(float(c), 4) for c in curve])
    if not shifted:
        result["sync_note"] = "the audio repeats itself at every out-of-sync shift: sync cannot be told from chance"
        return result
    chance = np.array([_lag_correlations(video, a, lags).max() for a in shifted])
    mean, best = float(chance.mean()), float(chance.max())
    spread = float(chance.std(ddof=1)) if len(chance) > 1 else 0.0
    result.update(sync_chance=round(mean, 4), sync_chance_sd=round(spread, 4), sync_chance_max=round(best, 4))
    if confidence < best + CHANCE_MARGIN or confidence < mean + MIN_CHANCE_Z * spread:
        result["sync_note"] = (f"not clearly above chance (peak {confidence:.2f} vs {mean:.2f} +- {spread:.2f} out of "
                               f"sync, best {best:.2f}): the mouth does not follow this audio")  # fmt: skip
    else:
        result["offset_frames"] = int(lags[peak])
    return result


def _highpass(x: np.ndarray, window: int) -> np.ndarray:
    """``x`` (T,) minus its centred moving average over ``window`` frames (edges padded with the edge value)."""
    pad = window // 2
    padded = np.pad(x.astype(np.float64), pad, mode="edge")  # (T + 2 pad,)
    sums = np.concatenate([[0.0], np.cumsum(padded)])
    return x - (sums[window:] - sums[:-window]) / window


def _lag_correlations(video: np.ndarray, audio: np.ndarray, lags: np.ndarray) -> np.ndarray:
    """Pearson correlation of ``video`` (T,) with ``audio`` (T,) at each lag -> (L,); at lag L video frame t is
    paired with audio frame t - L. A constant overlap correlates 0."""
    n = len(audio)
    out = np.zeros(len(lags))
    for i, lag in enumerate(lags):
        v = video[lag:] if lag >= 0 else video[: n + lag]
        a = audio[: n - lag] if lag >= 0 else audio[-lag:]
        v, a = v - v.mean(), a - a.mean()
        norm = np.sqrt((v * v).sum() * (a * a).sum())
        out[i] = float(v @ a / norm) if norm > _TINY else 0.0
    return out
