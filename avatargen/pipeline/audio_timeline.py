"""A bounded rolling buffer over an audio stream, addressed in video frames.

It reads blocks from any iterator (a file decoder or a live source) only as far as the schedule needs, keeps only the
samples later chunks can still ask for, and produces the N chunk spans lazily, so the timeline can be open-ended.
"""

from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np

from avatargen.errors import BadInputError
from avatargen.io.audio_stats import TrackStats
from avatargen.pipeline.schedule import Span, frame_count


class AudioTimeline:
    """Audio samples of one request, read lazily from ``blocks`` (float32 at ``sample_rate``): 1-D arrays for one
    track, (n, tracks) arrays for several (one per speaker, ``RenderInputs.tracks``).

    It also keeps each track's running sums (``statistics()``): a family that normalises over the whole track can
    estimate it from what has arrived when the track is a stream."""

    def __init__(self, blocks: Iterable[np.ndarray], sample_rate: int, fps: int, lookahead_frames: int):
        if sample_rate % fps:
            raise ValueError(f"sample_rate {sample_rate} is not a multiple of fps {fps}")
        self._blocks: Iterator[np.ndarray] = iter(blocks)
        self.sample_rate = sample_rate
        self.fps = fps
        self.samples_per_frame = sample_rate // fps
        self.lookahead_frames = lookahead_frames
        self._buffer: np.ndarray | None = None  # (n,) or (n, tracks), allocated with the first block
        self._buffer_start = 0  # absolute sample index of _buffer[0]
        self.samples_read = 0
        self.ended = False
        self._sums: list[TrackStats] | None = None  # per track, over every sample read so far

    @property
    def total_frames(self) -> int | None:
        """Frames of the whole timeline once the stream has ended, else None."""
        return frame_count(self.samples_read, self.sample_rate, self.fps) if self.ended else None

    def _read_until(self, sample: int) -> None:
        chunks = [] if self._buffer is None else [self._buffer]
        while not self.ended and self.samples_read < sample:
            block = next(self._blocks, None)
            if block is None:
                self.ended = True
                break
            block = np.asarray(block, dtype=np.float32)
            if block.ndim != 2 or block.shape[1] == 1:
                block = block.reshape(-1)  # one track
            if self._sums is None:
                self._sums = [TrackStats(0, 0.0, 0.0)] * self._tracks_of(block)
            self._sums = [total + TrackStats.of(track) for total, track in zip(self._sums, self._columns(block))]
            chunks.append(block)
            self.samples_read += block.shape[0]
        if chunks:
            self._buffer = np.concatenate(chunks) if len(chunks) > 1 else chunks[0]

    @staticmethod
    def _tracks_of(block: np.ndarray) -> int:
        return 1 if block.ndim == 1 else block.shape[1]

    @staticmethod
    def _columns(block: np.ndarray) -> list[np.ndarray]:
        return [block] if block.ndim == 1 else [block[:, k] for k in range(block.shape[1])]

    def statistics(self) -> list[TrackStats]:
        """Each track's sums over the samples read so far (all of it once the stream has ended)."""
        return list(self._sums or [TrackStats(0, 0.0, 0.0)])

    def spans(self, n_chunk_frames: int, first_chunk_frames: int | None = None) -> Iterator[Span]:
        """N chunk spans, each yielded once the audio reaches ``lookahead_frames`` past its end (or has ended).

        The first span is ``first_chunk_frames`` long (default ``n_chunk_frames``): a Wan model's first clip has no
        motion frames, so it shows more new frames than the later ones.
        """
        start, index = 0, 0
        while True:
            end = start + ((first_chunk_frames or n_chunk_frames) if index == 0 else n_chunk_frames)
            self._read_until((end + self.lookahead_frames + 1) * self.samples_per_frame)
            total = self.total_frames
            if total is not None:
                if index == 0 and total == 0:
                    raise BadInputError("the audio is shorter than one video frame; give at least a few milliseconds of sound")
                if total <= end:
                    yield Span(index, start, total, last=True)
                    return
            yield Span(index, start, end, last=False)
            start, index = end, index + 1

    def samples(self, start_frame: int, end_frame: int) -> np.ndarray:
        """Samples of frames [start_frame, end_frame), zero-filled before 0 and after the audio's end: (n,), or
        (n, tracks) for several tracks."""
        a, b = start_frame * self.samples_per_frame, end_frame * self.samples_per_frame
        self._read_until(b)
        if max(a, 0) < self._buffer_start:
            raise RuntimeError(f"audio before sample {self._buffer_start} was already released (asked for {a})")
        buffer = self._buffer if self._buffer is not None else np.zeros(0, dtype=np.float32)
        out = np.zeros((b - a, *buffer.shape[1:]), dtype=np.float32)
        lo, hi = max(a, self._buffer_start), min(b, self._buffer_start + buffer.shape[0])
        if hi > lo:
            out[lo - a : hi - a] = buffer[lo - self._buffer_start : hi - self._buffer_start]
        return out

    def release_before(self, frame: int) -> None:
        """Forget samples before ``frame``: no later step will ask for them (keeps memory constant)."""
        cut = frame * self.samples_per_frame - self._buffer_start
        if cut > 0 and self._buffer is not None:
            self._buffer = self._buffer[cut:].copy()
            self._buffer_start += cut
