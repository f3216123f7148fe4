"""Overlapped emission: segments leave the pipeline (SR -> decode -> publish) on a second thread while the calling
thread generates the next chunks (A2V), each thread with its share of the CPU threads.

On a CPU the two halves of a render cost about the same (A2V 40-55 % with one or two sampling steps), and small
tensor ops scale poorly from one thread to two (1.5x for a whole render on 2 cores), so two threads of one core each
finish sooner than one thread of two cores (docs/performance.md, "Overlapped emission"). When the emitting thread
falls behind, the pipeline runs the next segment's ``prepare`` (the bundled family: SR of half of it) on the
generating thread before handing it over (:meth:`EmitThread.behind`). The order of everything a sink sees is unchanged:
jobs run one at a time, in the order they were handed over. The frames are those of a render with a thread
each for every step after the first (within a rounding step of an inline render, as another `runtime.threads` is).
"""

from __future__ import annotations

import queue
import threading
from typing import TYPE_CHECKING, Callable

from avatargen.config.schema import Config, Offload
from avatargen.errors import ConfigError
from avatargen.threads import set_torch_thread_count, torch_thread_count

if TYPE_CHECKING:  # a type only: a render that runs no model imports no torch
    import torch


def overlaps(config: Config, device: torch.device, world_size: int) -> bool:
    """``runtime.overlap``, or when it is null: on for one process on a CPU with two threads or more, no offload.

    Not for a sharded render: its collectives must run in one order on every rank, and two threads would interleave
    them differently on each."""
    chosen = config.runtime.overlap
    if chosen is not None:
        if chosen and world_size > 1:
            raise ConfigError("runtime.overlap=true cannot run a sharded render (its ranks' collectives must run in one "
                              "order); set runtime.overlap=null")  # fmt: skip
        return chosen
    alone_on_a_cpu = device.type == "cpu" and world_size == 1
    return alone_on_a_cpu and config.runtime.offload == Offload.none and torch_thread_count() >= 2


def split_threads(threads: int) -> tuple[int, int]:
    """(generating thread, emitting thread) intra-op threads out of ``threads``: the generator gets the odd one."""
    emitting = max(1, threads // 2)
    return max(1, threads - emitting), emitting


class EmitThread:
    """Runs the jobs handed to it, in order, on one thread with ``threads`` intra-op threads.

    At most ``depth`` jobs wait: ``submit`` blocks beyond that, so the generator runs at most ``depth`` segments ahead
    of the sinks and memory stays bounded. A job's exception stops every later job from running; it is raised in the
    caller at its next ``submit`` or ``drain``.
    """

    def __init__(self, threads: int, depth: int = 2):
        self._jobs: queue.Queue[Callable[[], None] | None] = queue.Queue(maxsize=depth)
        self._threads = threads
        self._error: BaseException | None = None
        self._cancelled = False
        self._thread = threading.Thread(target=self._run, name="avatargen-emit", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        set_torch_thread_count(self._threads)  # per thread: the generating thread keeps its own count
        while True:
            job = self._jobs.get()
            try:
                if job is None:
                    return
                if self._error is None and not self._cancelled:
                    job()
            except BaseException as error:  # handed to the caller, which decides what it means
                self._error = error
            finally:
                self._jobs.task_done()

    def _raise_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            self._cancelled = True  # nothing after a failed segment may reach the sinks
            raise error

    def submit(self, job: Callable[[], None]) -> None:
        """Queue ``job`` after the ones already handed over (raises an earlier job's error instead)."""
        self._raise_error()
        self._jobs.put(job)

    def behind(self) -> bool:
        """A segment handed over earlier is still waiting for this thread to start it."""
        return self._jobs.qsize() > 0

    def drain(self) -> None:
        """Wait until every job handed over has run; raise the error of one that failed."""
        self._jobs.join()
        self._raise_error()

    def close(self, cancel: bool = False) -> None:
        """End the thread after the running job; with ``cancel`` the jobs still waiting are dropped, not run."""
        if cancel:
            self._cancelled = True
        self._jobs.put(None)
        self._thread.join()
