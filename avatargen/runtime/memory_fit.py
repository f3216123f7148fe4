"""Whether a family's weights fit where the placement pass will put them, checked before any is allocated.

Every weight is materialised once, in its home (avatargen/runtime/placement.py): host memory for ``runtime.offload=
model|block`` and for a CPU render, the device's memory otherwise; an FSDP rank holds its share. Checkpoint or random
weights alike are copied into buffers of their own (a memory-mapped checkpoint is read, not kept), so what a model
set needs is known from its meta-built structure. A render whose weights alone exceed the memory free there would be
killed by the kernel partway through loading (exit 137, no message) or fail in the allocator: it is refused at once,
one line naming the largest models' shares and what to change.

The check is deliberately one-sided: only this process's weights are counted, not a chunk's activations, other
processes on the machine (torchrun's other local ranks, a batch's other workers) nor the full fp32 copy an FSDP rank
makes of a randomly initialised model. A render it lets through may still run out of memory; it refuses only renders
whose weights cannot fit in what is free now (host: MemAvailable or the cgroup's room, page cache counted as free;
CUDA: the driver's free memory plus what torch's allocator holds unused).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from avatargen.errors import ConfigError
from avatargen.runtime.memory import host_available_bytes
from avatargen.runtime.placement import PlacementPlan

GIB, MIB = 2**30, 2**20


@dataclass(frozen=True)
class WeightsShare:
    """What one model puts where: ``home`` ``"host"`` or ``"device"``, ``nbytes`` on this rank."""

    name: str
    home: str
    nbytes: int
    dtype: torch.dtype


def weights_share(name: str, model: nn.Module, plan: PlacementPlan, world_size: int) -> WeightsShare:
    """The bytes meta-built ``model`` takes on this rank under ``plan``: floating parameters in the plan's dtype,
    buffers in their own (placement.py's ``_run_dtype``); an FSDP shard is 1 / its mesh's size of it (``world_size``
    where the plan has no mesh)."""
    nbytes = 0
    for parameter in model.parameters():
        dtype = plan.dtype if parameter.is_floating_point() else parameter.dtype
        nbytes += parameter.numel() * dtype.itemsize
    nbytes += sum(buffer.numel() * buffer.element_size() for buffer in model.buffers())
    if plan.policy == "fsdp":
        shards = plan.mesh.size() if plan.mesh is not None else world_size
        nbytes = -(-nbytes // max(shards, 1))
        on_host = plan.fsdp_host_offload or plan.device.type == "cpu"
    else:
        on_host = plan.policy in ("model", "block") or plan.device.type == "cpu"
    return WeightsShare(name, "host" if on_host else "device", nbytes, plan.dtype)


def device_free_bytes(device: torch.device) -> int | None:
    """Free memory of a CUDA device: the driver's, plus what torch's caching allocator reserved and holds unused (an
    earlier model set's, released in a batch that switches models). None for any other device."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    unused = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return int(torch.cuda.mem_get_info(device)[0]) + max(unused, 0)


def _size(nbytes: int) -> str:
    return f"{nbytes / GIB:.1f} GiB" if nbytes >= GIB else f"{nbytes / MIB:.0f} MiB"


def check_weights_fit(shares: list[WeightsShare], device: torch.device, host: int | None = None,
                      free_on_device: int | None = None) -> None:  # fmt: skip
    """ConfigError unless the weights of ``shares`` fit: host memory holds the host shares, the device its own.
    ``host`` / ``free_on_device``: the memory free there (None: read now)."""
    host = host_available_bytes() if host is None else host
    free_on_device = device_free_bytes(device) if free_on_device is None else free_on_device
    for home, available in (("host", host), ("device", free_on_device)):
        placed = [share for share in shares if share.home == home]
        need = sum(share.nbytes for share in placed)
        if available is None or need <= available:
            continue
        biggest = sorted(placed, key=lambda share: -share.nbytes)[:3]
        parts = ", ".join(f"{s.name} {_size(s.nbytes)} in {str(s.dtype).removeprefix('torch.')}" for s in biggest)
        if home == "device":
            where = f"{device}'s memory"
            fix = ("runtime.offload=block keeps idle weights in host memory, or shard the model over more GPUs "
                   "(torchrun)")
        elif device.type == "cuda":
            where, fix = "host memory (runtime.offload keeps the weights there)", "runtime.offload=none, or free memory"
        else:
            where = "host memory"
            fix = "free memory, choose a smaller model, or render on GPUs (docs/distributed.md)"
        raise ConfigError(f"the model's weights need {_size(need)} of {where} ({parts}) and {_size(available)} is "
                          f"free: {fix}")  # fmt: skip
