"""The Ray driver's progress bar on a terminal: jobs done of all, running, failed, frames per second over the
cluster, and the time left. Off the terminal (logs, scripts) the per-job lines say it instead."""

from __future__ import annotations

import time
from typing import Any


class BatchProgress:
    """``with BatchProgress(total, enabled) as bar: ... bar.update(dispatcher)``."""

    def __init__(self, total: int, enabled: bool):
        self.total, self.enabled = total, enabled
        self.started = time.monotonic()
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> BatchProgress:
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            columns = (TextColumn("batch"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[state]}"),
                       TimeRemainingColumn())  # fmt: skip
            self._progress = Progress(*columns, console=Console(stderr=True), transient=False)
            self._progress.start()
            self._task = self._progress.add_task("batch", total=self.total, state="")
        return self

    def update(self, dispatcher: Any) -> None:
        if self._progress is None:
            return
        counts = dispatcher.log.counts
        done = sum(counts.values())
        elapsed = max(1e-6, time.monotonic() - self.started)
        fps = dispatcher.frames_done / elapsed
        state = (f"{len(dispatcher.in_flight)} running, {counts['failed']} failed, {fps:.1f} fps over "
                 f"{len(dispatcher.in_flight) + len(dispatcher.idle)} worker(s)")  # fmt: skip
        self._progress.update(self._task, completed=done, state=state)

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()
