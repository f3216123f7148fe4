"""Several speakers' audio files as one timeline (``-a left.wav -a right.wav``): (n, tracks) float32 blocks.

``para`` (the reference's ``audio_type``): the speakers talk at once, every file from the start; the timeline is the
longest file, the shorter ones padded with silence (the reference needs equal lengths). ``add``: one after the other,
the first file then the second, each speaker's track silent while the other talks; the timeline is their sum.
Each file is decoded by its own ffmpeg as a stream (``AudioFileSource``), so memory stays constant.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from avatargen.io.audio import AudioFileSource
from avatargen.io.audio_stats import TrackStats

ARRANGEMENTS = ("para", "add")


def track_statistics(path: Path, sample_rate: int) -> TrackStats:
    """The sums over a whole file as the model hears it (mono, ``sample_rate``): one streamed decode of it."""
    total = TrackStats(0, 0.0, 0.0)
    with AudioFileSource(path, sample_rate) as source:
        for block in source:
            total = total + TrackStats.of(block)
    return total


class AudioTracksSource:
    """The speakers' files as (n, tracks) blocks (see the module docstring); an ``AudioFileSource`` per file, each
    checked when this is built."""

    def __init__(self, paths: list[Path], sample_rate: int, arrangement: str = "para", block_samples: int = 16000,
                 min_samples: int = 1) -> None:  # fmt: skip
        if arrangement not in ARRANGEMENTS:
            raise ValueError(f"arrangement must be one of {ARRANGEMENTS}, got {arrangement!r}")
        self.paths, self.sample_rate, self.arrangement = list(paths), sample_rate, arrangement
        self.sources = [AudioFileSource(p, sample_rate, block_samples=block_samples, min_samples=min_samples) for p in paths]
        hints = [s.duration_hint for s in self.sources]
        self.duration_hint = None if None in hints else (sum(hints) if arrangement == "add" else max(hints))
        self._blocks: Iterator[np.ndarray] | None = None

    @property
    def damage(self) -> str | None:
        """What a decoder found damaged in the last iteration (the first file's first), or None."""
        return next((f"'{s.path}': {s.damage}" for s in self.sources if s.damage), None)

    def __iter__(self) -> Iterator[np.ndarray]:
        self.close()
        self._blocks = self._add() if self.arrangement == "add" else self._para()
        return self._blocks

    def _para(self) -> Iterator[np.ndarray]:
        streams = [iter(source) for source in self.sources]
        live = [True] * len(streams)
        while True:
            blocks = [next(stream, None) if alive else None for stream, alive in zip(streams, live)]
            live = [block is not None for block in blocks]
            if not any(live):
                return
            size = max(block.size for block in blocks if block is not None)
            out = np.zeros((size, len(blocks)), dtype=np.float32)
            for k, block in enumerate(blocks):
                if block is not None:
                    out[: block.size, k] = block
            yield out

    def _add(self) -> Iterator[np.ndarray]:
        for k, source in enumerate(self.sources):
            for block in source:
                out = np.zeros((block.size, len(self.sources)), dtype=np.float32)
                out[:, k] = block
                yield out

    def statistics(self) -> tuple[TrackStats, ...]:
        """Each track's sums over the whole timeline (the silence padding included), one decode of each file."""
        stats = [track_statistics(path, self.sample_rate) for path in self.paths]
        length = sum(s.samples for s in stats) if self.arrangement == "add" else max(s.samples for s in stats)
        return tuple(s.padded(length) for s in stats)

    def close(self) -> None:
        """Stop every decoder."""
        for source in self.sources:
            source.close()
        if self._blocks is not None:
            self._blocks.close()
            self._blocks = None
