"""NUMA-aware placement: pin each rank to the CPUs of its GPU's NUMA node (or, CPU-only, its share of the nodes).

Host<->device copies (FSDP's CPU offload, the pinned weights of idle modules) run at full bandwidth only from memory
on the GPU's own socket, and the CPU threads feeding a GPU should run there too. Everything is read from sysfs, whose
root is a parameter so tests can use a fake tree; where the information is missing (no sysfs, ``numa_node`` = -1, an
empty or unreadable cpulist) the rank is left where it is.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from avatargen.runtime.world import WorldInfo

SYSFS = Path("/sys")


def parse_cpulist(text: str) -> list[int]:
    """A kernel cpulist ("0-3,8-11", "5", "0-7:2" strides, "" for none) -> sorted CPU ids."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        span, _, stride = part.partition(":")
        first, _, last = span.partition("-")
        step = int(stride) if stride else 1
        cpus.update(range(int(first), int(last or first) + 1, step))
    return sorted(cpus)


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def numa_nodes(sysfs: Path = SYSFS) -> list[int]:
    """The NUMA nodes the kernel knows, in order (empty without NUMA information)."""
    root = sysfs / "devices" / "system" / "node"
    try:
        names = [p.name for p in root.iterdir() if p.name.startswith("node") and p.name[4:].isdigit()]
    except OSError:
        return []
    return sorted(int(n[4:]) for n in names)


def node_cpus(node: int, sysfs: Path = SYSFS) -> list[int]:
    text = _read(sysfs / "devices" / "system" / "node" / f"node{node}" / "cpulist")
    try:
        return parse_cpulist(text) if text is not None else []
    except ValueError:
        return []


def pci_numa_node(bus_id: str, sysfs: Path = SYSFS) -> int | None:
    """NUMA node of a PCI device ("0000:17:00.0"); None where unknown (missing file, -1 on single-node boards)."""
    text = _read(sysfs / "bus" / "pci" / "devices" / bus_id.lower() / "numa_node")
    try:
        node = int(text.strip()) if text is not None else -1
    except ValueError:
        return None
    return node if node >= 0 else None


def _physical_index(index: int) -> int | str:
    """CUDA device ``index`` as NVML counts it: through ``CUDA_VISIBLE_DEVICES`` (an id, or a UUID string)."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if index < len(visible):
        return int(visible[index]) if visible[index].isdigit() else visible[index]
    return index


def cuda_bus_id(index: int) -> str | None:
    """The PCI bus id of CUDA device ``index`` in sysfs spelling, found WITHOUT initialising CUDA (so the process can
    be pinned before CUDA and the process group start their threads): from NVML when it is installed, else from the
    nvidia driver's sysfs folder (PCI order), or from torch once CUDA is already initialised; None otherwise."""
    try:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
        physical = _physical_index(index)
        handle = (pynvml.nvmlDeviceGetHandleByUUID(physical) if isinstance(physical, str)
                  else pynvml.nvmlDeviceGetHandleByIndex(physical))  # fmt: skip
        bus = pynvml.nvmlDeviceGetPciInfo(handle).busId
        bus = bus.decode() if isinstance(bus, bytes) else bus
        domain, rest = bus.split(":", 1)
        return f"{int(domain, 16) & 0xFFFF:04x}:{rest.lower()}"
    except Exception:  # no NVML (library or driver): fall back
        pass
    if not torch.cuda.is_initialized():
        return _bus_id_from_driver(_physical_index(index))
    props = torch.cuda.get_device_properties(index)
    bus, dev, domain = (getattr(props, k, None) for k in ("pci_bus_id", "pci_device_id", "pci_domain_id"))
    if bus is None or dev is None:
        return None
    return f"{domain or 0:04x}:{bus:02x}:{dev:02x}.0"


def _bus_id_from_driver(physical: int | str, sysfs: Path = SYSFS) -> str | None:
    """The ``physical``-th GPU bound to the nvidia driver in PCI order (NVML's order; CUDA's too on a machine of one
    GPU model), from sysfs alone."""
    if not isinstance(physical, int):
        return None
    try:
        ids = sorted(p.name for p in (sysfs / "bus" / "pci" / "drivers" / "nvidia").iterdir() if p.name.count(":") == 2)
    except OSError:
        return None
    return ids[physical].lower() if physical < len(ids) else None


def thread_ids() -> list[int]:
    """Every thread of this process (Linux: /proc/self/task); just this one where /proc is missing."""
    try:
        return sorted(int(p.name) for p in Path("/proc/self/task").iterdir() if p.name.isdigit())
    except OSError:
        return [0]


def set_affinity_all_threads(cpus: tuple[int, ...]) -> None:
    """``sched_setaffinity`` for every thread: on Linux it binds one thread, and threads started earlier (torch's
    intra-op pool, a decoder thread) would keep the old CPUs; threads started later inherit the binding."""
    for tid in thread_ids():
        try:
            os.sched_setaffinity(tid, cpus)
        except (ProcessLookupError, PermissionError):  # a thread that ended meanwhile
            pass


@dataclass(frozen=True)
class Placement:
    """The CPUs chosen for a rank (empty: leave it alone) and why, for the log line."""

    cpus: tuple[int, ...]
    reason: str


def choose_cpus(local_rank: int, gpu_bus_id: str | None, allowed: set[int], sysfs: Path = SYSFS) -> Placement:
    """The GPU's node when the GPU is known, else node ``local_rank % nodes``; limited to the CPUs this process may use."""
    nodes = numa_nodes(sysfs)
    if not nodes:
        return Placement((), "no NUMA information in sysfs")
    if gpu_bus_id is not None:
        node = pci_numa_node(gpu_bus_id, sysfs)
        if node is None:
            return Placement((), f"GPU {gpu_bus_id} has no NUMA node")
        why = f"GPU {gpu_bus_id} is on NUMA node {node}"
    else:
        node = nodes[local_rank % len(nodes)]
        why = f"CPU rank spread over {len(nodes)} NUMA node(s): node {node}"
    cpus = sorted(set(node_cpus(node, sysfs)) & allowed)
    if not cpus:
        return Placement((), f"{why}, but none of its CPUs are available to this process")
    return Placement(tuple(cpus), why)


def _format(cpus: tuple[int, ...]) -> str:
    runs: list[str] = []
    start = prev = cpus[0]
    for cpu in (*cpus[1:], None):
        if cpu is not None and cpu == prev + 1:
            prev = cpu
            continue
        runs.append(f"{start}-{prev}" if prev > start else str(start))
        if cpu is not None:
            start = prev = cpu
    return ",".join(runs)


def pin_rank(
    world: WorldInfo,
    device: torch.device,
    sysfs: Path = SYSFS,
    log: Callable[[str], None] = lambda line: sys.stderr.write(line + "\n"),  # one write: ranks share stderr
) -> Placement:
    """Pin every thread of this process to its NUMA node's CPUs and log one line saying what was chosen.

    Call it before the process group and CUDA are initialised (``start_parallel`` does): their threads, and the
    host memory they first touch, then start on the right node. torchrun's own ``--numa-binding`` (torch >= 2.9) is
    the alternative: set ``runtime.numa=false`` with it."""
    bus_id = None
    if device.type == "cuda":
        bus_id = cuda_bus_id(device.index if device.index is not None else world.local_rank)
    allowed = os.sched_getaffinity(0)
    placement = choose_cpus(world.local_rank, bus_id, allowed, sysfs)
    if placement.cpus and set(placement.cpus) != allowed:
        set_affinity_all_threads(placement.cpus)
        log(f"rank {world.rank}: pinned to CPUs {_format(placement.cpus)} ({placement.reason})")
    elif placement.cpus:
        log(f"rank {world.rank}: CPUs {_format(placement.cpus)} unchanged ({placement.reason})")
    else:
        log(f"rank {world.rank}: not pinned ({placement.reason})")
    return placement
