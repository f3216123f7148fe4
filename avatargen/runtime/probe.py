"""Timed probes of this CPU (``runtime.dtype=auto``'s bf16 check, and how fast int8 linear layers would be, for
``avatargen doctor``): the best of a few calls, each probe run on one core (``avatargen.threads.torch_threads(1)``)."""

from __future__ import annotations

import time
from typing import Callable


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
