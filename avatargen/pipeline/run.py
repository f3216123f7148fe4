"""``RenderRun``: what one render asks of the pipeline besides its reference, audio, sinks and prompt, in one frozen
object that rank 0 and the ranks that follow it share (avatargen/pipeline/follower.py)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from avatargen.pipeline.checkpoint import RenderCheckpoint
from avatargen.pipeline.inputs import RenderInputs
from avatargen.pipeline.schedule import CheckpointGrid
from avatargen.pipeline.stats import Progress


@dataclass(frozen=True)
class RenderRun:
    """``inputs``: what the request gives beyond the picture and the prompt (a source video, several audio tracks:
    pipeline/inputs.py); ``read_box`` (y0, y1, x0, x1), in model-frame pixels, is all the sinks read of each frame
    (None: the whole frame; a family may compute only that part). ``resume``: the checkpoint to continue from (the
    sinks then receive the frames after it only). Hooks: ``should_stop()`` is asked between steps (never inside one);
    ``on_checkpoint(point)`` receives the state at every frame of ``checkpoints`` (its tensors are not copied: save
    them before returning); ``on_progress(progress)`` after every segment. ``record_seams`` keeps the frame index of
    every chunk seam (for seam metrics)."""

    inputs: RenderInputs = field(default_factory=RenderInputs)
    read_box: tuple[int, int, int, int] | None = None
    resume: RenderCheckpoint | None = None
    checkpoints: CheckpointGrid | None = None
    on_checkpoint: Callable[[RenderCheckpoint], None] | None = None
    on_progress: Callable[[Progress], None] | None = None
    should_stop: Callable[[], bool] | None = None
    record_seams: bool = False

    def followed(self, should_stop: Callable[[], bool]) -> RenderRun:
        """What a rank that follows rank 0 runs: the same work and resume point, its own stop check, no hooks that
        write (rank 0 alone checkpoints and reports progress)."""
        return replace(self, should_stop=should_stop, checkpoints=None, on_checkpoint=None, on_progress=None)
