"""The job torchrun started: rank and world size, the process group and device mesh, and how ranks agree.

Every rank of a render over several ranks runs the same schedule on the same inputs, so the collectives FSDP, sequence
and guidance parallelism issue line up by construction. What this module adds is the rest of the contract: one
process group with a timeout (a lost rank ends the group instead of hanging it), the device meshes of the render's
layout (avatargen/runtime/layout.py), an agreed stop between steps (a pipeline of steps stops along the pipeline
instead: runtime/pipeline_parallel.py), rank 0's resume point on every rank, and
``rank_failures()``, which turns "another rank died mid-collective" into one line naming that rank and its error.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from avatargen.config.schema import Config
from avatargen.errors import EXIT_FAILURE, AvatarGenError, first_line
from avatargen.runtime.layout import ParallelLayout, SplittableWork, resolve_layout
from avatargen.runtime.world import WorldInfo, full_world, solo_rank, world_info

if TYPE_CHECKING:  # types only: a render alone in its process (solo_parallel) imports no torch here
    import torch

    from avatargen.runtime.guidance import GuidanceSplit
    from avatargen.runtime.pipeline_parallel import PipelineRanks

__all__ = ["ParallelContext", "RankFailedError", "WorldInfo", "ensure_process_group", "full_world", "rank_failures",
           "solo_parallel", "solo_rank", "start_parallel", "world_info"]  # fmt: skip


def backend_for(device: torch.device) -> str:
    """gloo on CPU; on CUDA nccl for tensors and gloo beside it for the small CPU objects ranks exchange."""
    return "cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo"


def ensure_process_group(device: torch.device, timeout_s: float) -> None:
    """Join torchrun's process group once per process (idempotent); destroyed at exit."""
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        return
    if device.type == "cuda":
        torch.cuda.set_device(full_world().local_rank)
    dist.init_process_group(backend_for(device), timeout=timedelta(seconds=timeout_s))
    atexit.register(_destroy)
    store = _store()
    if store is not None:  # who this rank is, for a rank that finds it gone (``_gone``)
        process = {"pid": os.getpid(), "host": socket.gethostname()}
        store.set(f"avatargen/process/{full_world().rank}", json.dumps(process))


def _destroy() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


@dataclass
class ParallelContext:
    """How this process takes part in one render: alone, or as one rank of a render over torchrun's ranks, laid out
    as ``layout`` says (avatargen/runtime/layout.py)."""

    world: WorldInfo
    mesh: Any = None  # FSDP's DeviceMesh when the weights are sharded: (shard,), or (guidance, shard) for HSDP
    layout: ParallelLayout = field(default_factory=ParallelLayout)
    work_mesh: Any = None  # DeviceMesh (guidance, replica, sequence) of a render over several ranks

    @property
    def sharded(self) -> bool:
        """Whether the big models' weights are FSDP-sharded over the ranks."""
        return self.mesh is not None

    @property
    def joined(self) -> bool:
        """Whether this process renders together with other ranks (collectives every rank must meet)."""
        return self.mesh is not None or self.work_mesh is not None or self.layout.pipeline > 1

    @property
    def pipeline_ranks(self) -> PipelineRanks | None:
        """This rank's stage of a pipeline of denoising steps (stages on ranks 1, ..., N - 1, 0), or None."""
        from avatargen.runtime.pipeline_parallel import PipelineRanks, stage_order

        if self.layout.pipeline == 1:
            return None
        order = stage_order(self.world.world_size)
        return PipelineRanks(order.index(self.world.rank), order)

    @property
    def sequence_group(self) -> Any:
        """The process group a DiT's tokens are split over (None: each rank holds them whole)."""
        return self.work_mesh.get_group("sequence") if self.layout.sequence > 1 else None

    def guidance_split(self) -> GuidanceSplit:
        """How a sampling step's guidance passes are shared over this rank's guidance group (all here without)."""
        from avatargen.runtime.guidance import GuidanceSplit

        return GuidanceSplit(self.work_mesh.get_group("guidance") if self.layout.guidance > 1 else None)

    def device_for(self, device: torch.device) -> torch.device:
        """Each rank of a CUDA job drives the GPU of its local rank."""
        if device.type == "cuda" and self.world.world_size > 1:
            import torch

            return torch.device("cuda", self.world.local_rank)
        return device

    def agreed(self, flag: Callable[[], bool]) -> Callable[[], bool]:
        """``flag`` as all ranks see it: true on every rank as soon as it is true on one (a stop request after
        SIGINT/SIGTERM must end the render at the same step everywhere, or the next collective would hang)."""
        if not self.joined:
            return flag
        import torch
        import torch.distributed as dist

        from avatargen.runtime.pipeline_parallel import PipelineStop

        if self.layout.pipeline > 1:  # stop between blocks on the first stage; the others where its end reaches them
            first = self.pipeline_ranks.stage == 0
            return PipelineStop(flag, first, _store(), f"avatargen/stop/{_generation}")

        def any_rank() -> bool:
            value = torch.tensor([1 if flag() else 0], dtype=torch.int32)
            dist.all_reduce(value, op=dist.ReduceOp.MAX)  # CPU tensor: gloo, also beside nccl
            return bool(value.item())

        return any_rank

    def from_primary(self, value: Any) -> Any:
        """Rank 0's ``value`` on every rank (pickled; small objects and CPU tensors, e.g. a resume point)."""
        if not self.joined:
            return value
        import torch.distributed as dist

        box = [value]
        dist.broadcast_object_list(box, src=0)  # CPU objects: gloo, also beside nccl
        return box[0]


_meshes: dict[tuple[str, int, int, int], tuple[Any, Any]] = {}


def _device_meshes(device_type: str, layout: ParallelLayout) -> tuple[Any, Any]:
    """(the work mesh (guidance, replica, sequence), FSDP's mesh) for ``layout``, built once per process: a batch in
    shard mode renders many jobs on the same groups. torchtitan's way: one world mesh, unflattened into named views
    (FSDP shards over replica x sequence, torchtitan's ``dp_shard x cp``; guidance is HSDP's replicate dimension)."""
    from torch.distributed.device_mesh import init_device_mesh

    key = (device_type, layout.guidance, layout.replicas, layout.sequence)
    if key not in _meshes:
        world = init_device_mesh(device_type, (layout.world,), mesh_dim_names=("world",))
        g, r, s = layout.guidance, layout.replicas, layout.sequence
        work = world._unflatten(0, (g, r, s), ("guidance", "replica", "sequence"))
        fsdp = world if g == 1 else world._unflatten(0, (g, r * s), ("guidance", "shard"))
        _meshes[key] = (work, fsdp)
    return _meshes[key]


def solo_parallel(config: Config, splittable: SplittableWork) -> ParallelContext | None:
    """The context of a render that one process does alone and unsharded (no process group, nothing to join), or
    None where ``start_parallel`` has a group to join."""
    world = world_info()
    layout = resolve_layout(config, world.world_size, splittable)
    return ParallelContext(world, layout=layout) if world.world_size == 1 and not layout.sharded else None


def start_parallel(config: Config, device: torch.device, splittable: SplittableWork) -> ParallelContext:
    """Decide how this process renders (``resolve_layout``, given what of the render its family can split); for a
    render over several ranks (or sharded) pin to NUMA, then join the process group and build the meshes."""
    solo = solo_parallel(config, splittable)
    if solo is not None:
        return solo
    world = world_info()
    layout = resolve_layout(config, world.world_size, splittable)
    if config.runtime.numa:  # first: the process group's and CUDA's threads then inherit the binding
        from avatargen.runtime.numa import pin_rank

        pin_rank(world, device)
    ensure_process_group(device, config.runtime.dist_timeout_s)
    if layout.pipeline > 1:  # point-to-point sends over the default group: no mesh
        return ParallelContext(world, layout=layout)
    work, fsdp = _device_meshes(device.type, layout)
    return ParallelContext(world, fsdp if layout.sharded else None, layout, work)


# -- failures across ranks -----------------------------------------------------------------------------------------

_generation = 0  # renders started in this process; all ranks of a sharded batch count alike


class RankFailedError(AvatarGenError):
    """Another rank of this job failed: the group cannot continue. Carries the failing rank's exit code."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILURE):
        super().__init__(message)
        self.exit_code = exit_code


def _store() -> Any:
    import torch.distributed as dist

    try:
        return dist.distributed_c10d._get_default_store()
    except Exception:  # no store (private API moved): fall back to the generic message
        return None


def _group_joined() -> bool:
    """Whether this process joined a process group (torch imported only where it can have)."""
    import torch.distributed as dist

    return dist.is_initialized()


def _one_line(error: BaseException) -> str:
    text = first_line(error)
    named = isinstance(error, AvatarGenError) or text == type(error).__name__  # says what it is already
    return text if named else f"{type(error).__name__}: {text}"


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


def _gone(store: Any, world: WorldInfo) -> dict[int, dict]:
    """Other ranks on this host whose process has ended (a zombie counts: torchrun has not reaped it yet), by rank:
    killed without a word (SIGKILL, the OOM killer). Ranks on other hosts cannot be told from here."""
    found: dict[int, dict] = {}
    for rank in range(world.world_size):
        key = f"avatargen/process/{rank}"
        if rank == world.rank or store is None or not store.check([key]):
            continue
        process = json.loads(store.get(key))
        if process.get("host") != socket.gethostname():
            continue
        try:
            state = Path(f"/proc/{int(process['pid'])}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError, ValueError):
            state = "gone"
        if state in ("gone", "Z", "X"):
            found[rank] = process
    return found


_KEPT = "avatargen_kept"  # the attribute note_kept sets


def note_kept(error: BaseException, kept: str) -> None:
    """Say on ``error`` where the video rendered so far is and how to resume (``kept``): if the error came from another
    rank's failure, ``rank_failures`` ends that rank's line with it."""
    try:
        setattr(error, _KEPT, kept)
    except AttributeError:  # an exception type without a __dict__
        pass


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
        if world.world_size == 1 or not _group_joined() or isinstance(error, (KeyboardInterrupt, SystemExit)):
            raise
        store = _store()
        others = _posted(store, generation, world, wait_s=0.0 if isinstance(error, AvatarGenError) else 3.0)
        kept = getattr(error, _KEPT, None)
        if others and not isinstance(error, AvatarGenError):
            rank, info = min(others.items())
            raise RankFailedError(
                f"rank {rank} of {world.world_size} failed: {info['message']}; the render stopped on all ranks"
                + (f"; {kept}" if kept else ""),
                info["exit_code"],
            ) from None
        gone = _gone(store, world) if not isinstance(error, AvatarGenError) else {}
        if gone:  # killed without posting a word: its sockets closed under this rank's collective
            rank, process = min(gone.items())
            raise RankFailedError(
                f"rank {rank} of {world.world_size} ended without a word (its process {process['pid']} is gone: "
                "killed by a signal or the kernel, out of memory?); the render stopped on all ranks"
                + (f"; {kept}" if kept else ""),
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
