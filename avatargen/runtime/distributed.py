"""The job torchrun started: rank and world size, the process group and device mesh, and how ranks agree.

Every rank of a sharded render runs the same schedule on the same inputs, so the collectives FSDP issues line up by
construction. What this module adds is the rest of the contract: one process group with a timeout (a lost rank ends
the group instead of hanging it), a device mesh, an agreed stop between steps, and ``rank_failures()``, which turns
"another rank died mid-collective" into one line naming that rank and its error.
"""

from __future__ import annotations

import atexit
import json
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist

from avatargen.config.schema import Config, ShardMode
from avatargen.errors import EXIT_FAILURE, AvatarGenError, ConfigError
from avatargen.runtime.numa import pin_rank
from avatargen.runtime.world import WorldInfo, full_world, solo_rank, world_info

__all__ = ["ParallelContext", "RankFailedError", "WorldInfo", "ensure_process_group", "full_world", "rank_failures",
           "solo_rank", "start_parallel", "world_info"]  # fmt: skip


def backend_for(device: torch.device) -> str:
    """gloo on CPU; on CUDA nccl for tensors and gloo beside it for the small CPU objects ranks exchange."""
    return "cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo"


def ensure_process_group(device: torch.device, timeout_s: float) -> None:
    """Join torchrun's process group once per process (idempotent); destroyed at exit."""
    if dist.is_initialized():
        return
    if device.type == "cuda":
        torch.cuda.set_device(full_world().local_rank)
    dist.init_process_group(backend_for(device), timeout=timedelta(seconds=timeout_s))
    atexit.register(_destroy)


def _destroy() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


@dataclass
class ParallelContext:
    """How this process takes part in one render: alone, or as one rank of an FSDP-sharded render."""

    world: WorldInfo
    mesh: Any = None  # torch.distributed.device_mesh.DeviceMesh when sharded

    @property
    def sharded(self) -> bool:
        return self.mesh is not None

    def device_for(self, device: torch.device) -> torch.device:
        """Each rank of a CUDA job drives the GPU of its local rank."""
        if device.type == "cuda" and self.world.world_size > 1:
            return torch.device("cuda", self.world.local_rank)
        return device

    def agreed(self, flag: Callable[[], bool]) -> Callable[[], bool]:
        """``flag`` as all ranks see it: true on every rank as soon as it is true on one (a stop request after
        SIGINT/SIGTERM must end the render at the same step everywhere, or the next collective would hang)."""
        if not self.sharded:
            return flag

        def any_rank() -> bool:
            value = torch.tensor([1 if flag() else 0], dtype=torch.int32)
            dist.all_reduce(value, op=dist.ReduceOp.MAX)  # CPU tensor: gloo, also beside nccl
            return bool(value.item())

        return any_rank


def shard_mode(config: Config, world: WorldInfo) -> ShardMode:
    """``runtime.shard`` resolved for this world; one render over several ranks must be sharded."""
    mode = config.runtime.shard
    if mode == ShardMode.auto:
        mode = ShardMode.fsdp if world.world_size > 1 else ShardMode.none
    if mode == ShardMode.none and world.world_size > 1:
        raise ConfigError(
            f"torchrun started {world.world_size} ranks but runtime.shard=none: one render would be written "
            f"{world.world_size} times; use runtime.shard=auto (or fsdp), avatargen batch, or --nproc-per-node 1"
        )
    return mode


def start_parallel(config: Config, device: torch.device, resume: bool = False) -> ParallelContext:
    """Decide how this process renders; for a sharded render pin to NUMA, then join the process group and build
    the mesh."""
    world = world_info()
    mode = shard_mode(config, world)
    if mode == ShardMode.none:
        return ParallelContext(world)
    if resume and world.world_size > 1:
        raise ConfigError(
            "--resume of a sharded render is not supported yet; resume it in one process (plain avatargen render "
            "--resume: runtime.* may differ from the stopped render's)"
        )
    from torch.distributed.device_mesh import init_device_mesh

    if config.runtime.numa:  # first: the process group's and CUDA's threads then inherit the binding
        pin_rank(world, device)
    ensure_process_group(device, config.runtime.dist_timeout_s)
    mesh = init_device_mesh(device.type, (world.world_size,), mesh_dim_names=("fsdp",))
    return ParallelContext(world, mesh)


# -- failures across ranks -----------------------------------------------------------------------------------------

_generation = 0  # renders started in this process; all ranks of a sharded batch count alike


class RankFailedError(AvatarGenError):
    """Another rank of this job failed: the group cannot continue. Carries the failing rank's exit code."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILURE):
        super().__init__(message)
        self.exit_code = exit_code


def _store() -> Any:
    try:
        return dist.distributed_c10d._get_default_store()
    except Exception:  # no store (private API moved): fall back to the generic message
        return None


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return text if isinstance(error, AvatarGenError) else f"{error.__class__.__name__}: {text}"


def _posted(store: Any, generation: int, world: WorldInfo, wait_s: float) -> dict[int, dict]:
    """Errors other ranks posted for this render (waiting up to ``wait_s`` for a rank that is still posting)."""
    found: dict[int, dict] = {}
    deadline = time.monotonic() + wait_s
    while store is not None:
        for rank in range(world.world_size):
            key = f"avatargen/failed/{generation}/{rank}"
            if rank != world.rank and rank not in found and store.check([key]):
                found[rank] = json.loads(store.get(key))
        if found or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    return found


@contextmanager
def rank_failures() -> Iterator[None]:
    """Around one render: a local error is posted for the other ranks and re-raised (prefixed with the rank on
    non-primary ranks); an error caused by another rank's failure (its sockets closed mid-collective) is replaced by
    that rank's own message, so rank 0 prints one line that names the rank that failed and why."""
    global _generation
    _generation += 1
    generation = _generation
    try:
        yield
    except BaseException as error:
        world = world_info()
        if world.world_size == 1 or not dist.is_initialized() or isinstance(error, (KeyboardInterrupt, SystemExit)):
            raise
        store = _store()
        others = _posted(store, generation, world, wait_s=0.0 if isinstance(error, AvatarGenError) else 3.0)
        if others and not isinstance(error, AvatarGenError):
            rank, info = min(others.items())
            raise RankFailedError(
                f"rank {rank} of {world.world_size} failed: {info['message']}; the sharded render stopped on all ranks",
                info["exit_code"],
            ) from None
        code = getattr(error, "exit_code", EXIT_FAILURE)
        if store is not None:
            payload = json.dumps({"message": _one_line(error), "exit_code": code})
            try:
                store.set(f"avatargen/failed/{generation}/{world.rank}", payload)
            except Exception:
                pass  # the store went away with the group: torchrun still reports this rank's exit
        if world.is_primary:
            raise
        raise RankFailedError(f"rank {world.rank} of {world.world_size}: {_one_line(error)}", code) from error
