"""Host memory readings for reports and benchmarks."""

from __future__ import annotations

import resource
from pathlib import Path


def peak_rss_mb() -> float:
    """Peak resident memory of this process since it started (not its children's, nor its parent's), in MiB.

    Linux's ``ru_maxrss`` is not that: a process started with fork/vfork + exec keeps its parent's high-water mark
    (the kernel carries it across exec), so a render launched by a script that once held 2 GB reports 2 GB. The
    ``VmHWM`` line of /proc/self/status belongs to this process's own address space; ``ru_maxrss`` is the fallback
    where /proc is missing.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
