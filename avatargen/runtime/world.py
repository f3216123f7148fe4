"""Which process this is in the torchrun job: rank, world size, local rank (read from torchrun's environment)."""

from __future__ import annotations

import os
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Iterator


@dataclass(frozen=True)
class WorldInfo:
    """This process's place in the job: global rank, world size, local rank on its machine, ranks per machine."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int = 1

    @property
    def is_primary(self) -> bool:
        """Only the primary rank touches the user's output path."""
        return self.rank == 0


_SOLO: ContextVar[bool] = ContextVar("avatargen_solo", default=False)


def world_info() -> WorldInfo:
    """Rank and world size from torchrun's environment; a plain launch (or a ``solo_rank()`` block) is rank 0 of 1."""
    if _SOLO.get():
        return WorldInfo(rank=0, world_size=1, local_rank=int(os.environ.get("LOCAL_RANK", 0)))
    return WorldInfo(
        rank=int(os.environ.get("RANK", 0)),
        world_size=int(os.environ.get("WORLD_SIZE", 1)),
        local_rank=int(os.environ.get("LOCAL_RANK", 0)),
        local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", 1)),
    )


@contextmanager
def solo_rank() -> Iterator[None]:
    """Inside the block this rank works alone (``avatargen batch`` in spread mode): renders see a world of one, shard
    nothing, and own the outputs of the jobs this rank was given."""
    token = _SOLO.set(True)
    try:
        yield
    finally:
        _SOLO.reset(token)


def full_world() -> WorldInfo:
    """The torchrun world regardless of ``solo_rank()`` (for the batch scheduler itself)."""
    token = _SOLO.set(False)
    try:
        return world_info()
    finally:
        _SOLO.reset(token)
