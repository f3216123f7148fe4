"""Whether a family's weights fit where the placement pass will put them, checked before any is allocated.

Every weight is materialised once, in its home (avatargen/runtime/placement.py): host memory for ``runtime.offload=
model|block`` and for a CPU render, the device's memory otherwise; an FSDP rank holds its share. Checkpoint or random
weights alike are copied into buffers of their own (a memory-mapped checkpoint is read, not kept), so what a model
set needs is known from its meta-built structure. A render whose weights alone exceed the memory there would be
killed by the kernel partway through loading (exit 137, no message) or fail in the allocator: it is refused at once,
one line naming each model's share and what to change.

Only the weights are counted, not a chunk's activations: a render this lets through may still run out of memory,
but one it refuses could never have run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from avatargen.errors import ConfigError
from avatargen.runtime.placement import PlacementPlan

GIB = 2**30


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


def host_available_bytes() -> int | None:
    """Memory this process may still take: /proc/meminfo's MemAvailable, lowered to a cgroup's limit less its use
    (a container's ``memory.max``); None where neither can be read."""
    found: list[int] = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            found.append(int(limit) - int(Path("/sys/fs/cgroup/memory.current").read_text()))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


def device_free_bytes(device: torch.device) -> int | None:
    """Free memory of a CUDA device (None for any other: a CPU render's weights are host memory)."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    return int(torch.cuda.mem_get_info(device)[0])


def check_weights_fit(shares: list[WeightsShare], device: torch.device, ranks_on_host: int = 1,
                      host: int | None = None, free_on_device: int | None = None) -> None:  # fmt: skip
    """ConfigError unless the weights of ``shares`` fit: host memory holds every rank's host share (``ranks_on_host``
    processes of one render on this machine), the device its own. ``host`` / ``free_on_device``: the memory there
    (None: read now)."""
    host = host_available_bytes() if host is None else host
    free_on_device = device_free_bytes(device) if free_on_device is None else free_on_device
    for home, available, copies in (("host", host, max(ranks_on_host, 1)), ("device", free_on_device, 1)):
        placed = [share for share in shares if share.home == home]
        need = copies * sum(share.nbytes for share in placed)
        if available is None or need <= available:
            continue
        biggest = sorted(placed, key=lambda share: -share.nbytes)[:3]
        parts = ", ".join(f"{s.name} {s.nbytes / GIB:.1f} GiB in {str(s.dtype).removeprefix('torch.')}" for s in biggest)
        where = "host memory" if home == "host" else f"{device}'s memory"
        ranks = f" ({copies} ranks on this machine)" if copies > 1 else ""
        fix = ("choose a smaller model, or run it where more memory is free (GPUs, or sharded over several machines "
               "with torchrun: docs/distributed.md)" if home == "host" else
               "runtime.offload=block keeps idle weights in host memory, or shard the model over more GPUs (torchrun)")
        raise ConfigError(f"the model's weights need {need / GIB:.1f} GiB of {where}{ranks} ({parts}) and "
                          f"{available / GIB:.1f} GiB is free: {fix}")  # fmt: skip
