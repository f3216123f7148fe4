"""The rolling state: the only tensors that outlive a chunk (besides the reference conditioning)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a type only: a render that runs no model imports no torch
    from torch import Tensor


@dataclass
class LatentWindow:
    """A family's per-frame tensors of timeline frames [start, start + T): latents, or pixels of frames shown."""

    start: int
    latents: Tensor  # (1, C, T, h, w)

    @property
    def end(self) -> int:
        return self.start + self.latents.shape[2]

    def frames(self, start: int, end: int) -> Tensor:
        """Latents of frames [start, end) (must lie inside the window): (1, C, end - start, h, w)."""
        if not (self.start <= start <= end <= self.end):
            raise IndexError(f"frames [{start}, {end}) are outside the window [{self.start}, {self.end})")
        return self.latents[:, :, start - self.start : end - self.start]

    def keep_last(self, count: int) -> "LatentWindow":
        """A window of only the last ``count`` frames, copied so the rest of the chunk's memory is freed."""
        keep_from = max(self.end - count, self.start)
        return LatentWindow(keep_from, self.frames(keep_from, self.end).clone())


@dataclass
class RollingState:
    """What persists between chunks: the N chunks whose frames later steps still read, and the last I chunk.

    At most two N windows are held (the previous one trimmed to its tail), so memory does not grow with duration.
    """

    n_windows: dict[int, LatentWindow] = field(default_factory=dict)
    i_window: LatentWindow | None = None
    i_index: int = -1

    def snapshot(self) -> "RollingState":
        """The state as it is now, unaffected by later steps (they replace windows, never write into their tensors)."""
        return RollingState(dict(self.n_windows), self.i_window, self.i_index)

    def window(self, source: str, index: int) -> LatentWindow:
        if source == "I":
            if self.i_window is None or self.i_index != index:
                raise KeyError(f"I chunk {index} is not held")
            return self.i_window
        return self.n_windows[index]
