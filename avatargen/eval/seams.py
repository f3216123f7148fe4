"""Seams: chunk boundaries a viewer can see, found without being told where they are, and robust to codec keyframes.

Change signal: ``frame_change`` is the mean absolute difference of consecutive frames reduced to ``COARSE`` x
``COARSE`` gray (area averages, ``Frame.gray``). At that scale a hard cut or a pose jump is a large change while
the detail that an H.264 keyframe re-encodes (the "pop" at the start of each GOP) mostly averages out.
``excess[t]`` is the change into frame t over the median change of its neighbours (``NEIGHBOURS`` frames each
side): about 1 for ordinary motion, >> 1 at a cut.

Blind search (``find_periodic_seams``): a chunked generator leaves seams at a fixed stride, so every stride P from
``MIN_PERIOD`` frames up to ``MAX_PERIOD_S`` (and a quarter of the video) and every phase is scored by the median
log excess at frames phase, phase + P, ... as a z-score against the spread of log excess over the whole video. The
best of thousands of (stride, phase) candidates scores high by chance alone (the best z of a render's values in
random order: about 5.3 over 8 s, 7.2-7.5 over 2 minutes, +- 0.6), so the bar is the video's own: the same search
over ``NULL_SHUFFLES`` random orders of its log excess (no stride left in them; the candidate's frames left out), a
Gumbel law fitted to their best z, and its ``1 - FALSE_ALARM`` quantile (``seam_z_threshold``, at least ``MIN_Z``).
The best stride is a seam pattern when its z reaches that bar and its median excess >= ``MIN_EXCESS``. When the best
stride takes in any of the codec's pops (keyframes whose excess is below ``KEYFRAME_POP_MAX``), the search is made
again without them: an encoder lays them at a stride of its own (avatargen's renders: a keyframe at each checkpoint
and a GOP later, two per 32 frames at two fixed phases of the 16-frame chunk grid, which read as a faint chunk
stride, excess 1.23, while the same phases' other frames scored 1.00). A real cut stays even where the encoder put a
keyframe on it: it is far larger than a pop. Where that stride was mostly keyframes, ``seam_note`` says so.

Known seams (``measure_known_seams``, avatargen's own renders): ``seam_ratio`` is the mean change at the seams
over the mean change elsewhere (``seam_ratio_worst``: the largest change at a seam over the median change), both
leaving out keyframes (a seam on a keyframe is counted in
``seams_on_keyframes`` and left out too). About 1: the seams cannot be told from ordinary motion; >> 1: visible.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from avatargen.errors import BadInputError
from avatargen.eval.context import EvalContext, Frame
from avatargen.eval.face_track import TrackedFace
from avatargen.eval.metric import Metric, Rows
from avatargen.eval.video import keyframe_indices

COARSE = 32
NEIGHBOURS = 6
MIN_PERIOD = 6
MIN_REPEATS = 4
MAX_PERIOD_S = 8.0  # chunk strides longer than this are not looked for
MIN_Z = 6.0  # the threshold's floor
NULL_SHUFFLES = 30  # random orders of the log excess searched for the threshold (seeded: the same video, the same bar)
FALSE_ALARM = 0.01  # the chance that a seam-free video's best stride reaches the threshold
MIN_EXCESS = 1.2
# Keyframe pops measured on a smooth photo clip, GOP 25: 1.75x at crf 28, 2.3x at crf 35; a 14-px cut: 36x.
KEYFRAME_POP_MAX = 4.0
KEYFRAME_SHARE = 0.75
# Added to both sides of each ratio: changes below this (gray levels) are invisible, and a static video (median
# change 0) must not turn an invisible change into an infinite ratio.
CHANGE_FLOOR = 0.3


def frame_change(previous: np.ndarray, frame: np.ndarray) -> float:
    """Mean |frame - previous| of two coarse gray frames, in gray levels."""
    return float(np.abs(frame - previous).mean())


def excess_over_neighbours(changes: np.ndarray) -> np.ndarray:
    """``changes`` (T,), changes[t] = change into frame t -> (T,) ratio to the median of the neighbours' changes
    (excess[0] = 1)."""
    n = len(changes)
    excess = np.ones(n)
    for t in range(1, n):
        around = np.concatenate([changes[max(1, t - NEIGHBOURS) : t], changes[t + 1 : t + 1 + NEIGHBOURS]])
        typical = float(np.median(around)) if len(around) else float(changes[t])
        excess[t] = (changes[t] + CHANGE_FLOOR) / (typical + CHANGE_FLOOR)
    return excess


def find_periodic_seams(changes: np.ndarray, keyframes: list[int], fps: float) -> dict:
    """Blind search for seams at a fixed stride (see the module docstring). Returns the ``seams_found*`` keys."""
    excess = excess_over_neighbours(changes)
    log_excess = np.log(excess)
    log_excess[0] = 0.0
    result: dict = {"seams_found": False, "seam_period_frames": None, "seam_frames": [], "seam_excess": None,
                    "seam_z": None, "seam_z_threshold": None, "seam_note": None}  # fmt: skip
    n = len(changes)
    keys = _marked(n, np.array([k for k in keyframes if 0 < k < n], dtype=np.int64))
    # A keyframe whose change is below a cut's is the codec's pop; a cut the encoder put a keyframe on is not.
    pops = keys & (excess < KEYFRAME_POP_MAX)
    max_period = int(MAX_PERIOD_S * fps)
    best = _best_stride(log_excess, np.zeros_like(pops), max_period)
    if best is None:
        result["seam_note"] = "video too short to look for a seam stride"
        return result
    period, phase, z = best
    frames = np.arange(phase, n, period)
    frames = frames[frames > 0]
    if pops[frames].any():  # the codec's pops among its frames: the search is made again without them
        if z >= MIN_Z and pops[frames].mean() >= KEYFRAME_SHARE:
            result["seam_note"] = (f"a change every {period} frames at the codec's keyframes (excess "
                                   f"{np.median(excess[frames]):.2f}): compression, not seams; looked again without "
                                   "keyframes")  # fmt: skip
        best = _best_stride(log_excess, pops, max_period)
        if best is None:
            return result
        period, phase, z = best
        frames = np.arange(phase, n, period)
        frames = frames[(frames > 0) & ~pops[frames]]
    threshold = _chance_threshold(log_excess, pops | _marked(n, frames), max_period)
    median_excess = float(np.median(excess[frames])) if len(frames) else 1.0
    result.update(seam_z=round(float(z), 2), seam_z_threshold=round(threshold, 2), seam_excess=round(median_excess, 4))
    if z >= threshold and median_excess >= MIN_EXCESS:
        result.update(seams_found=True, seam_period_frames=int(period), seam_period_s=round(period / fps, 3),
                      seam_frames=[int(f) for f in frames])  # fmt: skip
    return result


def measure_known_seams(changes: np.ndarray, seams: list[int], keyframes: list[int]) -> dict:
    """Seam ratio at given seam frames (a seam at s: frames s - 1 and s come from different chunks).

    Raises ``BadInputError`` for a seam outside 1..T-1.
    """
    n = len(changes)
    for s in seams:
        if not 1 <= s < n:
            raise BadInputError(f"seam {s} is outside the video's frames 1..{n - 1}; give seam frame indices")
    keys = {k for k in keyframes if 0 < k < n}
    others = np.ones(n, dtype=bool)
    others[0] = False
    others[list(seams)] = False
    others[list(keys)] = False
    typical = float(np.median(changes[others])) if others.any() else 0.0
    counted = [s for s in seams if s not in keys]
    ratios = [(float(changes[s]) + CHANGE_FLOOR) / (typical + CHANGE_FLOOR) for s in counted]
    # The mean at the seams over the mean elsewhere: speech moves a mouth in bursts, so a mean of changes sits above
    # their median, and a seam-free video scored its burstiness (a swinging jaw 1.2, a blended mouth 1.03).
    elsewhere = float(np.mean(changes[others])) if others.any() else 0.0
    at_seams = float(np.mean(changes[counted])) if counted else 0.0
    return {
        "seam_ratio": round((at_seams + CHANGE_FLOOR) / (elsewhere + CHANGE_FLOOR), 4) if counted else None,
        "seam_ratio_worst": round(float(np.max(ratios)), 4) if ratios else None,
        "seam_ratios": [round(r, 4) for r in ratios],
        "seams_known": [int(s) for s in seams],
        "seams_on_keyframes": len(seams) - len(counted),
        "seam_change_median": round(typical, 4),
    }


class Seams(Metric):
    """``keyframes`` (how many the stream has), the blind search's ``seams_found*`` keys and, where the seams are
    known (``EvalContext.seams``), the ``seam_ratio*`` keys."""

    def __init__(self, context: EvalContext) -> None:
        self.context = context
        self.changes: list[float] = [0.0]  # changes[t]: frame t - 1 -> t
        self.previous: np.ndarray | None = None

    def update(self, frame: Frame, face: TrackedFace | None) -> None:
        coarse = frame.gray(COARSE)
        if self.previous is not None:
            self.changes.append(frame_change(self.previous, coarse))
        self.previous = coarse

    def summary(self) -> dict[str, Any]:
        keyframes = keyframe_indices(self.context.video, self.context.fps)
        changes = np.asarray(self.changes)
        result: dict[str, Any] = {"keyframes": len(keyframes)}
        result.update(find_periodic_seams(changes, keyframes, self.context.fps))
        if self.context.seams:
            result.update(measure_known_seams(changes, list(self.context.seams), keyframes))
        else:
            result["seam_ratio"] = None
        return result

    def curves(self) -> dict[str, list[Any]]:
        return {"change": [round(float(c), 3) for c in self.changes]}

    @staticmethod
    def rows(result: dict[str, Any]) -> Rows:
        z, bar = result.get("seam_z"), result.get("seam_z_threshold")
        if result.get("seams_found"):
            rows = [("seams", f"a change every {result['seam_period_frames']} frames ({result['seam_period_s']:g} s), "
                              f"{result['seam_excess']:.2f}x the neighbouring change, at frames "
                              f"{result['seam_frames'][:4]}... (z {z:.1f}, chance bar {bar:.1f})")]  # fmt: skip
        else:
            best = f" (best z {z:.1f}, chance bar {bar:.1f})" if z is not None and bar is not None else ""
            rows = [("seams", f"no change repeats at a fixed stride more than chance allows{best}")]
        if result.get("seam_ratio") is not None:
            rows.append(("known seams", f"ratio {result['seam_ratio']:.2f} mean, {result['seam_ratio_worst']:.2f} "
                                        f"worst over {len(result['seam_ratios'])} seams (~1 invisible, >>1 visible "
                                        "cuts)"))  # fmt: skip
        return rows


def _marked(n: int, frames: np.ndarray) -> np.ndarray:
    """(n,) bool, True at ``frames``."""
    mask = np.zeros(n, bool)
    mask[frames] = True
    return mask


def _chance_threshold(log_excess: np.ndarray, skip: np.ndarray, max_period: int) -> float:
    """The z that the best stride of a seam-free video with these log excess values reaches only with probability
    ``FALSE_ALARM``: ``_best_stride`` over ``NULL_SHUFFLES`` seeded random orders of the values not in ``skip``, a
    Gumbel law fitted to their best z by its moments, its quantile; never below ``MIN_Z``.

    ``skip`` holds the candidate stride's own frames: were they seams, their large values, shuffled among the rest,
    would land a few to a phase of some long stride and lift the bar towards the very seams it is meant to judge (a
    hard cut every 2 s in a 10-s clip: 22.8 instead of 6.0, for the cuts' 32.8); left out, a real stride is judged
    against the video without it, and a chance one against nearly the whole video."""
    usable = np.flatnonzero(~skip[1:]) + 1  # frame 0 has no change into it
    rng = np.random.default_rng(0)
    shuffled = log_excess.copy()
    best_z = []
    for _ in range(NULL_SHUFFLES):
        shuffled[usable] = rng.permutation(log_excess[usable])
        best = _best_stride(shuffled, skip, max_period)
        if best is not None:
            best_z.append(best[2])
    if len(best_z) < 2:
        return MIN_Z
    scale = float(np.std(best_z, ddof=1)) * np.sqrt(6) / np.pi  # Gumbel: sd = scale * pi / sqrt(6)
    location = float(np.mean(best_z)) - np.euler_gamma * scale  # mean = location + gamma * scale
    return float(max(MIN_Z, location - scale * np.log(-np.log(1 - FALSE_ALARM))))


def _best_stride(log_excess: np.ndarray, skip: np.ndarray, max_period: int) -> tuple[int, int, float] | None:
    """(period, phase, z) of the stride whose frames have the highest median log excess (a median, so that one
    large unrelated change cannot make a stride), frames in ``skip`` left out."""
    n = len(log_excess)
    usable = np.ones(n, bool)
    usable[0] = False
    usable &= ~skip
    values = log_excess[usable]
    if len(values) < MIN_REPEATS * MIN_PERIOD:
        return None
    spread = max(1.4826 * float(np.median(np.abs(values - np.median(values)))), 0.02)
    masked = np.where(usable, log_excess, np.nan)
    best: tuple[int, int, float] | None = None
    for period in range(MIN_PERIOD, min(max_period, (n - 1) // MIN_REPEATS) + 1):
        rows = -(-n // period)
        grid = np.full(rows * period, np.nan)
        grid[:n] = masked
        grid = grid.reshape(rows, period)  # grid[k, phase] = frame k * period + phase
        counts = np.isfinite(grid).sum(axis=0)  # (period,)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a phase with only skipped frames: NaN, scored -inf
            medians = np.nanmedian(grid, axis=0)  # (period,)
        z = np.where(counts >= MIN_REPEATS, medians / spread * np.sqrt(counts), -np.inf)
        phase = int(np.argmax(z))
        if best is None or z[phase] > best[2]:
            best = (period, phase, float(z[phase]))
    return best
