"""The pipeline of a render whose sinks read nothing of the model's frames: no model is built, loaded or run.

A photograph whose mouth opens with its speech and whose interior is drawn in its own colours, or a mouth kept as
in the picture, reads no pixel of the frames a family makes (``ReferenceCompositor.reads_model``). Such a render
still runs the one chunk engine (avatargen/pipeline/pipeline.py): the audio read as it arrives, the frames left in
timeline order, stops, resume points, progress and stats as for any family; only its steps do no work, and each
segment leaves as blank frames of the model's size, which the compositor covers with the picture. Its schedule is
the family's (``FamilyEngine.schedule``), so keyframes and resume points fall where they would with the model: the
same video, bit for bit; a family that gives none has N chunks alone. Nothing here imports torch, and such a render
never does (tests/core/test_startup.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from avatargen.config.schema import Config
from avatargen.pipeline.audio_timeline import AudioTimeline
from avatargen.pipeline.family import ChunkRun, FamilyEngine
from avatargen.pipeline.inputs import RenderInputs
from avatargen.pipeline.pipeline import Pipeline
from avatargen.pipeline.schedule import ChunkSchedule, Emit, IChunk, NChunk
from avatargen.pipeline.state import RollingState
from avatargen.pipeline.stats import RenderStats
from avatargen.runtime.memory import keep_freed_heap
from avatargen.runtime.offload_monitor import OffloadMonitor

NO_MODEL = "no model ran: the compositor reads none of its frames"


class NoQuantization:
    """No linear layer ran, in int8 or otherwise."""

    int8 = False

    def describe(self) -> str:
        return "none (no model ran)"


class NoPrecision:
    """What a render with no model computes in, as ``Precision`` reports it: the compositor's float32 pixels."""

    name = signature = "float32"
    quantization = NoQuantization()

    def describe(self) -> str:
        return f"{self.name} ({NO_MODEL})"


class NoModels:
    """The ``PlacedModels`` of a render that runs none: nothing placed, nothing computed, no torch imported."""

    def __init__(self, config: Config) -> None:
        self.monitor = OffloadMonitor(config.runtime.offload.value, config.runtime.offload_resident_blocks, "cpu")
        self.precision = NoPrecision()


class BlankSteps:
    """``ChunkSteps`` that generate nothing over ``schedule``, each segment leaving as blank (side, side, 3) frames."""

    device = "cpu"  # nothing is computed: a resume point's (empty) state stays where it is read

    def __init__(self, schedule: ChunkSchedule, side: int) -> None:
        self.schedule = schedule
        self.audio_context_frames = 1  # a speech drive fed from the stream reads half a frame past a segment
        self.audio_history_frames = 0
        self.side = side

    def start(self, reference_rgb: np.ndarray, prompt: str, stats: RenderStats,
              read_box: tuple[int, int, int, int] | None, inputs: RenderInputs) -> BlankRun:  # fmt: skip
        # The compositor's per-frame arrays reuse the last segment's freed memory, the heap trimmed every few
        # seconds, not after every segment (trimmed each time, they were faulted in afresh: ~200 faults a frame).
        keep_freed_heap()
        return BlankRun(self.side)


class BlankRun(ChunkRun):
    """One render's steps with no model: a segment is its frame count; its frames are one read-only blank frame
    repeated (no memory per frame). The render's first frame leaves alone, before the rest of its segment is
    composited (the time to the first frame)."""

    def __init__(self, side: int) -> None:
        self.blank = np.zeros((1, side, side, 3), dtype=np.uint8)
        self.emitted = False

    def n_chunk(self, step: NChunk, audio: AudioTimeline, state: RollingState) -> None:
        pass

    def i_chunk(self, step: IChunk, audio: AudioTimeline, state: RollingState) -> None:
        pass

    def hand_over(self, step: Emit, state: RollingState) -> Any:
        return None

    def frames(self, segment: Any, step: Emit) -> Iterator[np.ndarray]:
        count = step.end - step.start
        sizes = [count] if self.emitted or count == 1 else [1, count - 1]
        self.emitted = True
        for size in sizes:
            yield np.broadcast_to(self.blank, (size, *self.blank.shape[1:]))  # (t, S, S, 3) uint8

    def restore(self, tensors: dict[str, Any], meta: dict[str, Any]) -> None:
        self.emitted = True


def blank_pipeline(config: Config, engine: FamilyEngine, side: int) -> Pipeline:
    """The Pipeline of a render whose sinks read none of ``engine``'s (side, side) frames: its schedule, no model.
    Never overlapped: its steps do no work for the emission to overlap with."""
    p = config.pipeline
    if engine.schedule is not None:
        schedule = engine.schedule(config, True)
    else:
        schedule = ChunkSchedule(p.n_chunk_frames, 0, False, p.seam_frames, p.anchor_frames)
    return Pipeline(BlankSteps(schedule, side), NoModels(config), config.model.sample_rate, config.model.fps)
