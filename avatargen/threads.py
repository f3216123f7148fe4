"""torch's intra-op thread count on the calling thread: read, set, or changed for a block.

torch is imported on first use, so modules on the path of a render that runs no model (a photograph with its speech)
can ask without importing it; only a render that runs models ever does.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


def torch_thread_count() -> int:
    """The calling thread's intra-op threads (a thread's first read is torch's process-wide count)."""
    import torch

    return torch.get_num_threads()


def set_torch_thread_count(count: int) -> None:
    """``count`` intra-op threads for the calling thread's torch ops from now on."""
    import torch

    torch.set_num_threads(count)


@contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """torch on ``count`` intra-op threads inside the block (this thread only), the previous count restored after.

    For work made of many small ops: split over two threads each op waits for the second core, ~8 ms apiece when
    another process keeps it busy (docs/performance.md, "Time to first frame")."""
    previous = torch_thread_count()
    set_torch_thread_count(count)
    try:
        yield
    finally:
        set_torch_thread_count(previous)
