"""Host memory readings for reports and benchmarks."""

from __future__ import annotations

import ctypes
import functools
import resource
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
    docs/performance.md); trimmed after every emitted segment it stays flat, for ~1-3 % more wall time.
    """
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)
