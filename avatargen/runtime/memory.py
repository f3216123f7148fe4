"""Host memory readings for reports and benchmarks; keeping long-lived objects out of the garbage collector."""

from __future__ import annotations

import ctypes
import functools
import gc
import os
import resource
import time
from collections.abc import Callable
from pathlib import Path


def _status_mb(field: str) -> float | None:
    """A memory line of /proc/self/status (``VmHWM``, ``VmRSS``) in MiB; None where /proc is missing."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return None


def peak_rss_mb() -> float:
    """Peak resident memory of this process since it started (not its children's, nor its parent's), in MiB.

    Linux's ``ru_maxrss`` is not that: a process started with fork/vfork + exec keeps its parent's high-water mark
    (the kernel carries it across exec), so a render launched by a script that once held 2 GB reports 2 GB. The
    ``VmHWM`` line of /proc/self/status belongs to this process's own address space; ``ru_maxrss`` is the fallback
    where /proc is missing.
    """
    peak = _status_mb("VmHWM")
    return peak if peak is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def settle_long_lived_objects() -> None:
    """Take every object alive now out of the cyclic garbage collector's scans (``gc.freeze``). With torch imported
    there are hundreds of thousands, and each full collection walked them all: 0.18 s of a render's time to first
    frame on a 2-core AVX2 CPU (docs/speed-measures.md, "Measures"). Called when a model set is built
    (``place_models``), once per process or per model set: what is frozen then stays alive (it does anyway: the
    imports, the config, the models; cyclic garbage of that moment too), what is made later is collected as before."""
    gc.freeze()


def current_rss_mb() -> float | None:
    """Resident memory of this process now, in MiB (None where /proc is missing)."""
    return _status_mb("VmRSS")


@functools.lru_cache(maxsize=1)
def _glibc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL("libc.so.6")
        return libc if hasattr(libc, "malloc_trim") else None
    except OSError:  # not glibc (macOS, musl): nothing to trim
        return None


def trim_host_memory() -> None:
    """Give memory that was freed back to the OS (glibc's ``malloc_trim``); a no-op elsewhere.

    glibc keeps freed heap memory for reuse, and the CPU tensors of a render (many sizes, several threads' arenas)
    fragment it: without trimming, a render's resident memory crept up about 25 MB per 6000 frames (measured:
    docs/performance.md). A render trims after its segments (``process_trimmer``).
    """
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


TRIM_INTERVAL_S = 5.0  # with the heap kept (``keep_freed_heap``), a render gives freed memory back at most this often


class HeapTrimmer:
    """``trim_host_memory`` at most once per ``interval_s`` of wall time (0: at every call): the pipeline calls it
    after each segment.

    A trim gives every free page back, so the next segment's tensors fault their memory in afresh: trimmed after
    every 16-frame segment, the bundled model's render spent about 10 % of its CPU time in page faults (1.1 million
    in 30 s of video, AVX2 emulated); once per 5 s with the heap kept, the ~60 MB a trim gives back cost ~40 ms to
    fault in again, under 1 % of those 5 s (docs/performance.md, "Memory over duration"). The resident size still
    stays flat: untrimmed, the heap creeps by ~25 MB per 6000 frames, about 1 MB per 5 s of a render."""

    def __init__(self, interval_s: float = 0.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._last = clock()

    def __call__(self) -> bool:
        """Trim if ``interval_s`` has passed since the last trim (or since this trimmer was made); True if it did."""
        if self._clock() - self._last < self.interval_s:
            return False
        trim_host_memory()
        self._last = self._clock()
        return True


@functools.cache
def process_trimmer() -> HeapTrimmer:
    """This process's :class:`HeapTrimmer`, its interval set by how the heap is used (``keep_freed_heap``: every
    ``TRIM_INTERVAL_S``; otherwise after every segment). Renders one after another in one process (``avatargen
    batch``) share its clock, so a run of renders shorter than its interval still trims every few seconds."""
    return HeapTrimmer()


_M_TRIM_THRESHOLD = -1  # mallopt's parameter numbers (malloc.h)
_M_MMAP_THRESHOLD = -3
MAPPED_ALLOCATION_BYTES = 1 << 20  # every allocation of 1 MiB or more gets its own mapping
HEAP_ALLOCATION_BYTES = 32 << 20  # glibc's ceiling for its mapping threshold (64-bit): smaller ones from its heap
KEPT_FREE_BYTES = 1 << 30  # free heap memory glibc may keep at its top before free() gives it back
DEFAULT_TRIM_THRESHOLD_BYTES = 128 << 10  # glibc's own


def map_large_allocations() -> bool:
    """Make glibc serve every allocation of ``MAPPED_ALLOCATION_BYTES`` or more (tensor buffers) from its own
    mapping, returned to the OS when freed, and the heap trimmed after every segment (``process_trimmer``); False
    where nothing was changed (``_set_heap_thresholds``: not glibc, or the environment sets glibc's thresholds).

    By default glibc raises its mapping threshold to the largest block freed so far (up to 32 MiB), so after the
    first few frees a toy-sized model's activations all come from the heap, whose holes are only given back by
    ``trim_host_memory``: between two trims the resident memory rose by 30 to 170 MB, a different amount each time,
    and the peak of a render was the worst of those, higher the more segments it had (docs/wan-performance.md). With a
    fixed threshold a freed activation leaves at once, so the peak is the live tensors' and does not depend on the
    duration; the price is a fresh zeroed mapping per large tensor (page faults): 10-25 % more wall time for a
    toy-sized model (measured); not measured at full size, where the large tensors pass 32 MiB and were mapped
    anyway.
    Process-wide, from the call on.
    """
    process_trimmer().interval_s = 0.0  # a heap of small blocks: trimming it after every segment costs nothing
    return _set_heap_thresholds(MAPPED_ALLOCATION_BYTES, DEFAULT_TRIM_THRESHOLD_BYTES)


def keep_freed_heap() -> bool:
    """Make glibc keep freed memory for reuse: allocations under ``HEAP_ALLOCATION_BYTES`` from its heap, and what
    is freed kept there (up to ``KEPT_FREE_BYTES`` at its top) until ``trim_host_memory``, which a render then calls
    every ``TRIM_INTERVAL_S`` (``process_trimmer``); False where nothing was changed (as ``map_large_allocations``;
    the render then trims after every segment).

    glibc's default adapts both thresholds to the blocks freed so far, and a render of the bundled model still gave
    memory back and faulted it in again segment after segment: 520,000 page faults in 30 s of video without any
    trim, 150,000 with these (the process's peak the same, 394-398 MB). Called by the bundled model's renders and by
    those that run no model (avatargen/pipeline/blank.py); the Wan family maps its large tensors instead
    (``map_large_allocations``) and trims after every segment (trimmed only every 5 s, a wan_tiny render's peak rose
    1.3 % from 120 s to 300 s of audio, against 0.3 %). Process-wide, from the call on."""
    kept = _set_heap_thresholds(HEAP_ALLOCATION_BYTES, KEPT_FREE_BYTES)
    process_trimmer().interval_s = TRIM_INTERVAL_S if kept else 0.0
    return kept


def _set_heap_thresholds(mmap_bytes: int, trim_bytes: int) -> bool:
    """glibc's mapping and trim thresholds (which also stops it adapting them); False where nothing was changed: not
    glibc, or the environment sets ``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_`` or a ``glibc.malloc``
    tunable, which win."""
    libc = _glibc()
    user_set = any(name in os.environ for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"))
    if libc is None or user_set or "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, mmap_bytes)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, trim_bytes))


def host_available_bytes() -> int | None:
    """Memory this process may still take: /proc/meminfo's MemAvailable, lowered to its cgroup's room (the limit, less
    what the cgroup uses other than page cache the kernel can drop, as ``docker stats`` counts it; cgroup v2 or v1,
    found from /proc/self/cgroup); None where neither can be read."""
    found: list[int] = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    room = _cgroup_room()
    if room is not None:
        found.append(room)
    return max(min(found), 0) if found else None


def _cgroup_room() -> int | None:
    """Limit less non-reclaimable use of this process's memory cgroup (None: no limit, or none readable)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # v2: memory.max, memory.current, memory.stat's inactive_file
            files = ("memory.max", "memory.current", "inactive_file")
        elif "memory" in controllers.split(","):  # v1
            files = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
        else:
            continue
        for folder in (Path("/sys/fs/cgroup") / path.lstrip("/"), Path("/sys/fs/cgroup"),
                       Path("/sys/fs/cgroup/memory") / path.lstrip("/"), Path("/sys/fs/cgroup/memory")):  # fmt: skip
            read = _room_in(folder, *files)
            if read is not None:  # the first folder that holds the files is the cgroup's
                return read[0]
    return None


def _room_in(folder: Path, limit_file: str, usage_file: str, reclaimable_key: str) -> tuple[int | None] | None:
    """(the room under the limit in ``folder``, None where there is no limit), or None where the files are not there."""
    try:
        limit_text = (folder / limit_file).read_text().strip()
        usage = int((folder / usage_file).read_text())
        stat = dict(line.split()[:2] for line in (folder / "memory.stat").read_text().splitlines() if " " in line)
        limit = None if limit_text == "max" or int(limit_text) >= 2**62 else int(limit_text)  # v1's "none" is huge
        reclaimable = int(stat.get(reclaimable_key, 0))
    except (OSError, ValueError):
        return None
    return (None if limit is None else limit - usage + reclaimable,)
