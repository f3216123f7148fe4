"""The calling thread's torch intra-op thread count, changed for a block."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """torch on ``count`` intra-op threads inside the block (this thread only), the previous count restored after.

    For work made of many small ops: split over two threads each op waits for the second core, ~8 ms apiece when
    another process keeps it busy (docs/performance.md, "Time to first frame")."""
    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
