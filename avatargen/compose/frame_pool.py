"""``FramePool``: a batch of frames composited on several threads at once, each frame by one of them.

A photograph's render runs no model (avatargen/pipeline/blank.py): all its work is compositing, frame by frame, and
on one thread it left the second core to ffmpeg alone. Each frame's pixels are a pure function of the frame, its
index and the render's constant state (the compositor's set-up, the speech heard up to it, the seeded blinks), so
splitting a batch into runs of consecutive frames gives the same frames in any order on any thread
(tests/compose/test_frame_pool.py). Each thread runs torch on one intra-op thread: the ops are small (a head box, a
mouth box), and elementwise ops give the same values on any number of threads.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TypeVar

import torch

from avatargen.threads import torch_threads

T = TypeVar("T")
RUN_FRAMES = 2  # frames per job: small enough that a slow frame (a blink, a wide mouth) does not hold a thread alone


class FramePool:
    """Runs ``work(start, end)`` over runs of consecutive frames of a batch on ``threads`` threads: the caller's and
    ``threads`` - 1 helpers, each taking the next run as it is free (1: the whole batch on the caller's thread)."""

    def __init__(self, threads: int) -> None:
        self.threads = max(1, int(threads))
        self._executor: ThreadPoolExecutor | None = None
        if self.threads > 1:
            self._executor = ThreadPoolExecutor(self.threads - 1, thread_name_prefix="avatargen-composite",
                                                initializer=torch.set_num_threads, initargs=(1,))  # fmt: skip
            weakref.finalize(self, self._executor.shutdown, wait=False)

    def run(self, work: Callable[[int, int], T], count: int) -> list[T]:
        """``work(start, end)`` over frames 0 .. ``count`` - 1 in runs, each frame once; what each run returned, in
        order. A run's error is raised here, once every thread has stopped taking runs."""
        if self._executor is None or count < 2:
            return [work(0, count)]
        starts = iter(range(0, count, RUN_FRAMES))
        taking = threading.Lock()
        results: dict[int, T] = {}

        def take_runs() -> None:
            while True:
                with taking:
                    start = next(starts, None)
                if start is None:
                    return
                results[start] = work(start, min(start + RUN_FRAMES, count))

        helpers = [self._executor.submit(take_runs) for _ in range(min(self.threads - 1, count // RUN_FRAMES))]
        try:
            with torch_threads(1):
                take_runs()
        finally:
            wait(helpers)  # no helper writes into the batch once this returns
        for helper in helpers:
            helper.result()  # a helper's error, raised here
        return [results[start] for start in sorted(results)]

    def close(self) -> None:
        """The helper threads end once their runs are done; later batches run on the caller's thread."""
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None
