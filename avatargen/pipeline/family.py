"""What a model family implements so that the chunk engine (avatargen/pipeline/pipeline.py) can run it.

The engine owns everything that is the same for every family: the loop over ``ChunkSchedule.steps``, replay on
resume, stop checks, resume points, emission in timeline order (inline or on a second thread), progress and stats.
A family supplies the steps themselves, in two objects (torchtitan's shape: one loop, a model overrides step methods
only, never the loop):

- ``ChunkSteps``, built once per placed model set: the schedule its chunks follow, how much audio its steps read
  around a chunk, and ``start()``, which encodes one request's reference and prompt (the init phase);
- ``ChunkRun``, what ``start()`` returns: one render's steps (N chunk, I chunk, hand-over, frames of a segment) and
  its output-side state (the decoder's causal cache, frames already shown), which it saves into a resume point and
  restores from one.

The rolling state between chunks (``RollingState``: the N windows later steps read, the last I chunk) belongs to the
engine, which snapshots and saves it; the family's steps read and replace its windows.
"""

from __future__ import annotations

from typing import Any, Iterator, Protocol

import numpy as np
import torch
from torch import Tensor

from avatargen.pipeline.audio_timeline import AudioTimeline
from avatargen.pipeline.inputs import RenderInputs
from avatargen.pipeline.schedule import ChunkSchedule, Emit, IChunk, NChunk
from avatargen.pipeline.state import RollingState
from avatargen.pipeline.stats import RenderStats
from avatargen.runtime.offload import OffloadMonitor
from avatargen.runtime.precision import Precision


class PlacedModels(Protocol):
    """A family's modules as placed for this process (built once, reused by every render while the config holds)."""

    monitor: OffloadMonitor  # what placement cost (reset per render)
    precision: Precision  # what the forwards compute in (reported, part of the resume fingerprint)


class ChunkRun:
    """One render's steps over a family's models (see the module docstring); ``start()`` has run the init phase.

    ``n_chunk`` and ``i_chunk`` generate into the rolling state; ``hand_over`` takes a segment out of it on the
    generating thread (cheap: the state then lets go of what later steps do not read); ``prepare`` is work on a
    segment that may run on either thread (the engine moves it to the generating thread when the emitting one falls
    behind); ``frames`` turns a segment into uint8 frames (t, H, W, 3), in order, on the emitting thread.
    """

    def n_chunk(self, step: NChunk, audio: AudioTimeline, state: RollingState) -> None:
        raise NotImplementedError

    def i_chunk(self, step: IChunk, audio: AudioTimeline, state: RollingState) -> None:
        raise NotImplementedError

    def hand_over(self, step: Emit, state: RollingState) -> Any:
        raise NotImplementedError

    def prepare(self, segment: Any, step: Emit) -> Any:
        """Work on a segment that may run on either thread; by default none."""
        return segment

    def frames(self, segment: Any, step: Emit) -> Iterator[np.ndarray]:
        raise NotImplementedError

    def save(self) -> tuple[dict[str, Tensor], dict[str, Any]]:
        """The output-side state after the segments emitted so far: (tensors, JSON-able metadata)."""
        return {}, {}

    def restore(self, tensors: dict[str, Tensor], meta: dict[str, Any]) -> None:
        """Continue from ``save()``'s state of a stopped render (ResumeMismatchError when it cannot)."""

    def stream_ended(self) -> bool:
        """Whether this run's chunks stopped coming from elsewhere (a pipeline stage whose previous stage stopped:
        runtime/pipeline_parallel.py); the engine then stops before the next step, as if asked to. By default never."""
        return False

    def finish(self) -> None:
        """After the last step, on the way out of a render that ran to its end or stopped (not one that failed): a
        pipeline stage tells the next one that no block follows. By default nothing."""


class ChunkSteps(Protocol):
    """A family's chunk steps over its placed models: what the engine needs before a render starts."""

    schedule: ChunkSchedule
    device: torch.device  # where the rolling state's tensors live
    audio_context_frames: int  # audio frames its steps read past a chunk's end (the span waits for them)
    audio_history_frames: int  # audio frames before an N chunk's start that it or later steps still read

    def start(self, reference_rgb: np.ndarray, prompt: str, stats: RenderStats,
              read_box: tuple[int, int, int, int] | None, inputs: RenderInputs) -> ChunkRun:  # fmt: skip
        """The init phase of one request: the reference (uint8 (H, W, 3), framed) and prompt encoded once.

        ``read_box`` (y0, y1, x0, x1) in model-frame pixels is all the sinks read of each frame (None: all of it);
        a family may compute only that part (the frames' other pixels are then zero). ``inputs``: a source video,
        several audio tracks and their regions, the tracks' statistics (pipeline/inputs.py); a family that takes
        none of them (``Family.follows_video``, ``Family.speakers``) is never handed them."""
        ...
