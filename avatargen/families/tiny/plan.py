"""What a render takes from the bundled family without building its models (no torch): its chunk schedule, the
files it reads, what its ranks can split. A render whose compositor reads none of the model's frames (a photograph
driven by its speech: avatargen/pipeline/blank.py) needs nothing more of the family."""

from __future__ import annotations

from pathlib import Path

from avatargen.config.families import resolve_checkpoint
from avatargen.config.schema import Config, WeightsSource
from avatargen.families.tiny.config import INTERPOLATES, SHIPPED_CHECKPOINTS, motion_frames_for
from avatargen.pipeline.schedule import ChunkSchedule
from avatargen.runtime.layout import SplittableWork

# One thread while placing: hundreds of small copies and inits; on two threads under load they took 0.66 s against
# 0.05 s for the tiny model, the same weights to the bit (copies and the seeded init do not depend on the thread count).
BUILD_THREADS = 1


def chunk_schedule(config: Config, composited: bool | None = None) -> ChunkSchedule:
    """The bundled family's chunk schedule (``FamilyEngine.schedule``): its motion frames and I chunks by default."""
    p = config.pipeline
    motion = motion_frames_for(config, composited)
    return ChunkSchedule(p.n_chunk_frames, motion, p.interpolates(INTERPOLATES), p.seam_frames, p.anchor_frames)


def weight_files(config: Config) -> list[Path]:
    """The safetensors files a render reads (none for random weights)."""
    if config.model.weights == WeightsSource.random:
        return []
    checkpoint = resolve_checkpoint(config, SHIPPED_CHECKPOINTS)
    return sorted(checkpoint.glob("*.safetensors")) if checkpoint.is_dir() else [checkpoint]


def parallel_work(config: Config) -> SplittableWork:
    """What one render of the bundled model can split over torchrun's ranks: the A2V's tokens (about 1,200 a window),
    on request (``runtime.sequence_parallel=N``) but not by ``auto``: on a CPU, N ranks of one thread split them no
    faster than one process's N threads, while every rank would still run SR and the decoder whole; on a GPU a
    1,200-token forward is too short for the exchanges to pay (docs/distributed.md, "The bundled model"). One sampling
    pass a step: no guidance to split."""
    return SplittableWork(sequence=True, sequence_by_default=False)
