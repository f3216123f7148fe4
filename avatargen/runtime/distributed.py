"""What torchrun tells this process about the job (rank, world size), read from its environment."""

from __future__ import annotations

import os
from dataclasses import dataclass

from avatargen.errors import ConfigError


@dataclass(frozen=True)
class WorldInfo:
    rank: int
    world_size: int
    local_rank: int

    @property
    def is_primary(self) -> bool:
        """Only the primary rank touches the user's output path."""
        return self.rank == 0


def world_info() -> WorldInfo:
    """Rank and world size from torchrun's environment; a plain launch is rank 0 of 1."""
    return WorldInfo(
        rank=int(os.environ.get("RANK", 0)),
        world_size=int(os.environ.get("WORLD_SIZE", 1)),
        local_rank=int(os.environ.get("LOCAL_RANK", 0)),
    )


def require_single_process(world: WorldInfo) -> None:
    """Sharded multi-rank rendering is not built yet: fail clearly instead of rendering N copies."""
    if world.world_size > 1:
        raise ConfigError(
            f"torchrun started {world.world_size} ranks, but sharded rendering is not available yet; "
            "use torchrun --nproc-per-node 1 or plain avatargen"
        )
