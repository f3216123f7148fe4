"""What a render reports while it runs (``Progress``) and when it ends (``RenderStats``), and the NaN guard every
family's steps use."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator

from avatargen.errors import NonFiniteError

if TYPE_CHECKING:  # a type only: a render that runs no model imports no torch
    from torch import Tensor


@dataclass
class Progress:
    """Reported after every emitted segment."""

    frames_done: int
    n_chunks_done: int
    i_chunks_done: int
    total_frames: int | None  # known once the audio has ended (or from a duration hint given to the caller)
    elapsed_s: float


@dataclass
class RenderStats:
    """What one render did and how long each stage took."""

    frames: int = 0
    n_chunks: int = 0
    i_chunks: int = 0
    ttff_s: float | None = None  # from render start to the first frame handed to the sinks
    wall_s: float = 0.0
    seams: list[int] | None = None  # first frame of every emitted segment after the first (when recorded)
    stopped: bool = False  # should_stop() said so: the render ended early, after a whole step
    resumed_from: int = 0  # the frame a resumed render started at (0: from the start)
    stage_s: dict[str, float] = field(default_factory=lambda: {"init": 0.0, "context": 0.0, "a2v": 0.0, "sr": 0.0, "decode": 0.0, "publish": 0.0})
    stage_runs: dict[str, int] = field(default_factory=dict)  # how many times each stage ran (what ran, not its time)

    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        """Add the wall time of the ``with`` body to ``stage_s[stage]`` and one to ``stage_runs[stage]`` (from either
        thread of an overlapped render)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            with self._lock:
                self.stage_s[stage] = self.stage_s.get(stage, 0.0) + time.perf_counter() - start
                self.stage_runs[stage] = self.stage_runs.get(stage, 0) + 1


def check_finite(tensor: Tensor, module: str, where: str) -> None:
    """Stop the render, naming the module, rather than write garbage: NaN/Inf come from a broken checkpoint."""
    if not tensor.isfinite().all():
        raise NonFiniteError(
            f"the {module} model produced NaN/Inf {where}; its checkpoint is broken or mismatched: re-create or re-copy it"
        )
