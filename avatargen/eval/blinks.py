"""Blinks from the face track (``face_track.py``).

``blinks_per_min``: the frames where the eyes look shut, in runs that last ``MIN_BLINK_S..MAX_BLINK_S`` seconds (at
least a frame; a lone frame the face chip misplaced is not a blink), per minute of video with a face. A frame looks shut
where the eye openness dips under its running median (over 2 s) by ``BLINK_MIN_DROP``, or ``BLINK_NOISE`` times its own
noise where that is more (a robust spread of its ratio to the median), or where the eyes' dark (the pupil and iris) in
any of ``face_track.DARK_BANDS`` rises over its running median by ``DARK_MIN_RISE`` of the face chip's range, or
``DARK_NOISE`` times that band's noise where that is more: the lid covers them. The bands: both eyes' middles together,
and the same a little higher, where a turned face's eyes are; and each eye's middle alone, at three heights. A face
turned ~30 degrees behind glasses needs the last: its far eye's band holds the rim's black, which no lid covers and
which sets the pair's percentile: the pair misses every one of its blinks (0 of 9 over 20 s), each eye alone counts 9. A
run of frames past ``HYSTERESIS`` of those thresholds counts whole where one of its frames passes one: a hazy,
low-contrast print's blink raises the dark only 0.03-0.07 of the range, for one frame over 0.03 and the next under it (6
of the 8 blinks seeded over 20 s were counted; with the floor at 0.025 and the run, 8; none more on ten other photos,
benchmarks/quality/blink_count.py). A cartoon's drawn blink drops the openness by half; a photograph's lid, its lashes
and creases kept, by 15-18 % (its noise 0.8 %), but an eye behind glasses by 3-8 % (its rims and wrinkles stay), where
its dark rises by 0.14-0.21 over noise of 0.007-0.009 (at most 3 noises away from a blink). People blink about 15-20
times a minute; 0 on a long clip is a frozen stare.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from avatargen.eval.context import EvalContext, Frame
from avatargen.eval.face_track import DARK_BANDS, TrackedFace
from avatargen.eval.metric import Metric, Rows

BLINK_MIN_DROP, BLINK_NOISE = 0.1, 6.0
DARK_MIN_RISE, DARK_NOISE = 0.025, 6.0
HYSTERESIS = 0.5  # a shut run's other frames need only pass this share of a threshold
MIN_BLINK_S, MAX_BLINK_S = 0.06, 0.5


def measure_blinks(eyes: np.ndarray, fps: float, dark: np.ndarray | None = None) -> dict:
    """``eyes``: (T,) eye openness, NaN where no face; ``dark``: (T,) or (T, bands) the eyes' dark (None: openness
    alone), each band judged on its own."""
    found = np.isfinite(eyes)
    minutes = found.sum() / fps / 60.0
    if found.sum() < 2 * fps:
        return {"blinks_per_min": None, "blinks": None}
    filled, running = _running_median(eyes, found, fps)
    ratio = filled / np.maximum(running, 1e-9)
    drop = max(BLINK_MIN_DROP, BLINK_NOISE * _noise(ratio))
    closed, nearly = ratio < 1.0 - drop, ratio < 1.0 - HYSTERESIS * drop  # (T,) each
    if dark is not None:
        for band in np.asarray(dark, float).reshape(len(eyes), -1).T:  # each band of the eyes' middle
            filled, running = _running_median(band, found, fps)
            rise = filled - running
            least = max(DARK_MIN_RISE, DARK_NOISE * _noise(rise))
            closed, nearly = closed | (rise > least), nearly | (rise > HYSTERESIS * least)
    edges = np.diff(np.concatenate([[0], nearly.astype(np.int8), [0]]))  # nearly: closed and more
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    passed = np.array([closed[start:end].any() for start, end in zip(starts, ends)], bool)
    shortest = max(1, int(round(MIN_BLINK_S * fps)))  # 2 frames at 25 fps
    count = int(np.sum(passed & ((ends - starts) >= shortest) & ((ends - starts) <= MAX_BLINK_S * fps)))
    return {"blinks": count, "blinks_per_min": round(count / minutes, 2)}


def _running_median(values: np.ndarray, found: np.ndarray, fps: float) -> tuple[np.ndarray, np.ndarray]:
    """(T,) ``values`` with the frames not ``found`` filled in from their neighbours, and (T,) their median over 2 s
    around each frame."""
    frames = np.arange(len(values))
    filled = np.interp(frames, frames[found], values[found])
    half = int(fps)
    padded = np.pad(filled, half, mode="edge")
    return filled, np.array([np.median(padded[t : t + 2 * half + 1]) for t in range(len(filled))])


def _noise(signal: np.ndarray) -> float:
    """The spread of ``signal`` (T,) as a normal law's, robustly (1.4826 median absolute deviations)."""
    return 1.4826 * float(np.median(np.abs(signal - np.median(signal))))


class Blinks(Metric):
    """``blinks`` and ``blinks_per_min``."""

    def __init__(self, context: EvalContext) -> None:
        self.fps = context.fps
        self.eyes: list[float] = []  # openness, NaN without a face
        self.dark: list[tuple[float, ...]] = []  # the eyes' dark in each of ``DARK_BANDS``, NaN without a face

    def update(self, frame: Frame, face: TrackedFace | None) -> None:
        self.eyes.append(np.nan if face is None else face.eyes)
        self.dark.append((np.nan,) * len(DARK_BANDS) if face is None else face.eye_dark)

    def summary(self) -> dict[str, Any]:
        return measure_blinks(np.asarray(self.eyes, float), self.fps, np.asarray(self.dark, float))

    @staticmethod
    def rows(result: dict[str, Any]) -> Rows:
        if result.get("blinks_per_min") is None:
            return []
        return [("blinks", f"{result['blinks_per_min']:.0f} per minute ({result['blinks']} in all)")]
