"""Timed probes of this CPU (``runtime.dtype=auto``'s bf16 check, and how fast int8 linear layers would be, for
``avatargen doctor``): the best of a few calls on one core, the thread count restored afterwards."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Callable, Iterator

import torch


def best_time_s(call: Callable[[], object], repeats: int) -> float:
    """The fastest of ``repeats`` timed calls of ``call``, after one untimed warm-up (the first call picks and primes
    its kernel); a call the scheduler interrupted does not count."""
    call()
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - started)
    return best


@contextmanager
def one_cpu_thread() -> Iterator[None]:
    """torch's intra-op threads set to one inside, restored after: a probe times a core, not the scheduler."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
