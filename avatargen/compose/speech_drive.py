"""``SpeechDrive``: how far a photograph's mouth opens in each video frame, read from the speech itself.

The bundled model draws a photograph's open mouth as a smear it was never taught (docs/model-card.md, Limits): read
from its frames, the opening followed loudness at r 0.06-0.75 over the test photos, a frame late, and on a dark or
grey photo not at all. A photograph's warp is driven by the audio instead (the model's frame still gives the mouth's
interior), as the training data drove its cartoons' mouths: from loudness.

Per video frame ``t``, the level is the RMS of the audio under it and half a frame either side (``WINDOW_FRAMES``),
in dB over the track's speech level (the 95th percentile of the frames' dB, so quiet and loud recordings open alike),
mapped from ``FLOOR_DB`` below it (shut: pauses, the closure of m, b, p) to the speech level (1) as the ``CURVE``
power of the way. A pure
function of the audio and the frame index (resume and chunking give the same pixels); no smoothing, so no lag.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

import numpy as np

WINDOW_FRAMES = 2.0  # the RMS window, in frames, centred on the frame's own
FLOOR_DB = 24.0  # this far below the speech level the mouth is shut ...
CURVE = 1.5  # ... and the level rises as this power of the way from there to the speech level (loud syllables open
# most: over the 6 s of benchmarks/portrait_judge.py, r with loudness 0.90 against 0.84 linear in dB)
SPEECH_PERCENTILE = 95.0
SILENT_DB = -70.0  # a track whose speech level is below this (dBFS) is silence: shut throughout


class SpeechDrive:
    """The per-frame opening level (0 shut .. 1 the speech level, more on the loudest) of a whole audio track.

    ``blocks`` yields the track as float32 mono blocks at ``sample_rate``; it is read on a thread of its own from the
    start (one streamed pass: a long file's decode overlaps the models' start, and only 2 numbers a frame are kept);
    ``levels`` waits for it."""

    def __init__(self, blocks: Callable[[], Iterable[np.ndarray]], sample_rate: int, fps: int) -> None:
        self.sample_rate, self.fps = int(sample_rate), int(fps)
        self._levels: np.ndarray | None = None
        self._error: BaseException | None = None
        self._ready = threading.Event()
        threading.Thread(target=self._compute, args=(blocks,), name="speech-drive", daemon=True).start()

    def _compute(self, blocks: Callable[[], Iterable[np.ndarray]]) -> None:
        try:
            self._levels = frame_levels(blocks(), self.sample_rate, self.fps)
        except BaseException as error:  # noqa: BLE001: raised in ``levels``, on the compositing thread
            self._error = error
        finally:
            self._ready.set()

    def levels(self, first: int, count: int) -> np.ndarray:
        """(count,) levels of frames ``first`` .. ``first + count - 1`` (0 past the audio's end)."""
        self._ready.wait()
        if self._error is not None:
            raise self._error
        out = np.zeros(count)
        known = self._levels[first : first + count]
        out[: len(known)] = known
        return out


def frame_levels(blocks: Iterable[np.ndarray], sample_rate: int, fps: int) -> np.ndarray:
    """(frames,) the opening level of every video frame of the audio in ``blocks`` (see the module docstring)."""
    half = sample_rate / fps / 2  # samples per half frame
    per_half = np.zeros(0)  # per half frame: the sum of squares
    done = 0  # samples read
    for block in blocks:
        bins = ((done + np.arange(len(block))) / half).astype(np.int64)  # each sample's half frame
        sums = np.bincount(bins, weights=np.asarray(block, np.float64) ** 2)
        if len(sums) > len(per_half):
            per_half = np.pad(per_half, (0, len(sums) - len(per_half)))
        per_half[: len(sums)] += sums
        done += len(block)
    frames = max(1, int(np.ceil(len(per_half) / 2)))
    padded = np.pad(per_half, (1, 2 * frames + 1 - len(per_half)))  # a half frame of silence either side
    # frame t: its own two half frames and the one either side (WINDOW_FRAMES = 2)
    window = padded[0:-2:2][:frames] + padded[1:-1:2][:frames] + padded[2::2][:frames] + padded[3::2][:frames]
    rms = np.sqrt(window / (WINDOW_FRAMES * 2 * half))
    db = 20.0 * np.log10(np.maximum(rms, 1e-6))
    reference = np.percentile(db, SPEECH_PERCENTILE)
    if reference < SILENT_DB:  # no speech at all
        return np.zeros(frames)
    return np.clip((db - (reference - FLOOR_DB)) / FLOOR_DB, 0.0, None) ** CURVE
