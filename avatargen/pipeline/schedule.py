"""The N/I chunk schedule: which chunk is generated when, and which frames leave the pipeline when.

N chunks tile the timeline. The I chunk of seam k re-generates the frames around the boundary between N chunk k and
N chunk k+1 from anchors on both sides (the last frames of N_k before the seam, the first frames of N_k+1 after
it); the I chunk's predictions for the anchors are discarded. Execution order::

    N0 -> N1 -> I0 -> N2 -> I1 -> N3 -> I2 -> ...

Frames leave in timeline order, each exactly once: N_k's body after I_(k-1), the seam after its I chunk.
The schedule is a pure function of the N spans, which arrive lazily, so an open-ended audio stream works: the span
of N_k is known once the audio reaches past its end (or ends inside it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator, Union


@dataclass(frozen=True)
class Span:
    """The timeline frames [start, end) of N chunk ``index``; ``last`` when the audio ends inside it."""

    index: int
    start: int
    end: int
    last: bool


@dataclass(frozen=True)
class NChunk:
    """Generate frames [start, end), conditioned on the previous N chunk's frames [cond_start, start)."""

    index: int
    start: int
    end: int
    cond_start: int

    @property
    def window(self) -> tuple[int, int]:
        return self.cond_start, self.end


@dataclass(frozen=True)
class IChunk:
    """Re-generate the seam [seam_start, seam_end) between N chunks ``index`` and ``index + 1``.

    Anchors: [left_start, seam_start) from N_index and [seam_end, right_end) from N_(index+1).
    """

    index: int
    left_start: int
    seam_start: int
    seam_end: int
    right_end: int

    @property
    def window(self) -> tuple[int, int]:
        return self.left_start, self.right_end


@dataclass(frozen=True)
class Emit:
    """Frames [start, end) leave the pipeline, taken from chunk ``source`` ('N' or 'I') number ``index``."""

    source: str
    index: int
    start: int
    end: int


Step = Union[NChunk, IChunk, Emit]


def frame_count(num_samples: int, sample_rate: int, fps: int) -> int:
    """Video frames for ``num_samples`` of audio: round(duration x fps), halves rounded up."""
    return (2 * num_samples * fps + sample_rate) // (2 * sample_rate)


@dataclass(frozen=True)
class ChunkSchedule:
    """Chunk and anchor sizes (from ``pipeline.*``) and the step order they imply."""

    n_chunk_frames: int
    motion_frames: int
    interpolate: bool
    seam_frames: int
    anchor_frames: int
    first_chunk_frames: int | None = None  # the first N span's length when it differs (a Wan model's first clip)

    @property
    def seam_left(self) -> int:
        return self.seam_frames // 2

    @property
    def seam_right(self) -> int:
        return self.seam_frames - self.seam_left

    def spans(self, total_frames: int) -> Iterator[Span]:
        """The N spans of a timeline of known length (the streaming path produces them from the audio instead)."""
        start, index = 0, 0
        while start < total_frames:
            length = (self.first_chunk_frames or self.n_chunk_frames) if index == 0 else self.n_chunk_frames
            end = min(start + length, total_frames)
            yield Span(index, start, end, last=end >= total_frames)
            start, index = end, index + 1

    def steps(self, spans: Iterable[Span]) -> Iterator[Step]:
        """Yield generation and emission steps in execution order, consuming ``spans`` lazily."""
        previous: Span | None = None
        emitted = 0  # every frame before this has left the pipeline
        for span in spans:
            cond_start = max(previous.end - self.motion_frames, previous.start) if previous else span.start
            yield NChunk(span.index, span.start, span.end, cond_start)
            if not self.interpolate:
                yield Emit("N", span.index, span.start, span.end)
                emitted = span.end
            else:
                if previous is not None:
                    seam = self._seam(previous, span)
                    yield seam
                    yield Emit("I", seam.index, seam.seam_start, seam.seam_end)
                    emitted = seam.seam_end
                body_end = span.end if span.last else max(span.end - self.seam_left, emitted)
                if body_end > emitted:
                    yield Emit("N", span.index, emitted, body_end)
                    emitted = body_end
            previous = span
            if span.last:
                return

    def _seam(self, left: Span, right: Span) -> IChunk:
        boundary = left.end
        seam_start = max(boundary - self.seam_left, left.start)
        seam_end = min(boundary + self.seam_right, right.end)
        return IChunk(
            index=left.index,
            left_start=max(seam_start - self.anchor_frames, left.start),
            seam_start=seam_start,
            seam_end=seam_end,
            right_end=min(seam_end + self.anchor_frames, right.end),
        )

    @property
    def tail_frames(self) -> int:
        """How many of an N chunk's last frames later steps still read (motion frames and left anchors)."""
        return max(self.motion_frames, self.seam_left + self.anchor_frames if self.interpolate else 0)


@dataclass(frozen=True)
class CheckpointGrid:
    """Timeline frames where the rolling state is checkpointed for resume: every ``f > 0`` with
    ``(f + shift) % period == 0``.

    They are ends of N chunk bodies (``shift`` = the seam's left half, or 0 without I chunks, less the frames the
    first N chunk has beyond ``n_chunk_frames``), every ``period / n_chunk_frames`` chunks; right after such a body leaves, no I chunk is pending. The MP4 writer forces
    an IDR keyframe at the same frames, so a resumed run can start a new part of the video there.
    """

    period: int
    shift: int

    def contains(self, frame: int) -> bool:
        return frame > 0 and (frame + self.shift) % self.period == 0


def checkpoint_grid(schedule: ChunkSchedule, keyframe_interval: int) -> CheckpointGrid:
    """A checkpoint every whole number of N chunks, about one keyframe interval of video apart (at least one chunk)."""
    chunks = max(1, -(-keyframe_interval // schedule.n_chunk_frames))  # ceil
    shift = schedule.seam_left if schedule.interpolate else 0
    shift -= (schedule.first_chunk_frames or schedule.n_chunk_frames) - schedule.n_chunk_frames
    return CheckpointGrid(chunks * schedule.n_chunk_frames, shift % (chunks * schedule.n_chunk_frames))
