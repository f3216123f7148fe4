"""Real-time pacing (``--realtime``): frames leave for the encoder on the wall clock, at the video's frame rate."""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass

import numpy as np

from avatargen.io.sink import FrameSink

_DONE = None


@dataclass
class PacingStats:
    """What pacing saw. An underrun is a frame that was not ready when it was due: viewers saw the video stall."""

    buffer_s: float
    underruns: int = 0
    stall_s: float = 0.0  # total time the output waited for late frames
    max_lead_s: float = 0.0  # how far generation got ahead of the clock (bounded by the queue)

    def as_dict(self) -> dict[str, float | int]:
        return {"buffer_s": self.buffer_s, "underruns": self.underruns, "stall_s": round(self.stall_s, 3),
                "max_lead_s": round(self.max_lead_s, 3)}  # fmt: skip


class RealtimePacer:
    """A FrameSink that hands frames to ``sink`` at ``fps`` on the wall clock, from a thread of its own.

    Frame k is due ``buffer_s + k / fps`` after the first frame arrived; the generator never waits for the clock (it
    only blocks when it is ``queue_s`` ahead, which bounds memory). When a frame arrives after its due time (by more
    than one frame period) it is an underrun: counted, its lateness added to ``stall_s``, and the clock moves back by
    that much, so the frames after it keep their spacing instead of rushing out to catch up. Nothing is dropped.
    ``on_underrun(count)`` is called (on the pacing thread) at each one.
    """

    def __init__(self, sink: FrameSink, fps: int, buffer_s: float = 1.0, queue_s: float = 2.0, on_underrun=None):
        self.sink = sink
        self.fps = fps
        self.stats = PacingStats(buffer_s=buffer_s)
        self._on_underrun = on_underrun
        self._queue: queue.Queue[np.ndarray | None] = queue.Queue(maxsize=max(1, round((buffer_s + queue_s) * fps)))
        self._error: BaseException | None = None
        self._hurry = False  # set when stopping early: what is queued goes out at once
        self._thread = threading.Thread(target=self._run, name="realtime-pacer", daemon=True)
        self._thread.start()

    def write(self, frames: np.ndarray) -> None:
        """Queue uint8 frames (T, H, W, 3); blocks only while ``queue_s`` of frames wait. Re-raises a sink failure."""
        for frame in frames:
            self._raise_failure()
            while True:
                try:
                    self._queue.put(frame, timeout=0.1)
                    break
                except queue.Full:
                    self._raise_failure()

    def close(self, hurry: bool = False) -> None:
        """Wait until every queued frame went out (paced, or at once with ``hurry``); re-raises a sink failure."""
        self._hurry = self._hurry or hurry
        while self._thread.is_alive():
            try:
                self._queue.put(_DONE, timeout=0.1)
                break
            except queue.Full:
                continue
        self._thread.join()
        self._raise_failure()

    def discard(self) -> None:
        """Stop at once, dropping queued frames (the render failed; the sink is being aborted). Idempotent."""
        self._hurry = True
        while self._thread.is_alive():
            try:
                self._queue.get_nowait()
            except queue.Empty:
                pass
            try:
                self._queue.put_nowait(_DONE)
            except queue.Full:
                pass
            self._thread.join(timeout=0.1)

    def _raise_failure(self) -> None:
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        start: float | None = None
        shift = 0.0  # the clock's delay after underruns
        index = 0
        try:
            while (frame := self._queue.get()) is not _DONE:
                now = time.perf_counter()
                if start is None:
                    start = now + self.stats.buffer_s
                due = start + shift + index / self.fps
                if now < due:
                    self.stats.max_lead_s = max(self.stats.max_lead_s, due - now + self._queue.qsize() / self.fps)
                    if not self._hurry:
                        time.sleep(due - now)
                elif now - due > 1.0 / self.fps and index > 0:
                    self.stats.underruns += 1
                    self.stats.stall_s += now - due
                    shift += now - due
                    if self._on_underrun is not None:
                        self._on_underrun(self.stats.underruns)
                self.sink.write(frame[None])
                index += 1
        except BaseException as error:  # noqa: BLE001 - handed to the render thread, which raises it
            self._error = error
            while True:  # unblock a writer waiting on a full queue
                try:
                    self._queue.get_nowait()
                except queue.Empty:
                    break
