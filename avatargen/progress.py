"""The rich progress bar of a render: chunks, frames, generation fps, real-time factor, ETA."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # types only: the CLI imports this before torch
    from avatargen.pipeline.pipeline import Progress


class RenderProgress:
    """A progress bar on stderr, or nothing when ``enabled`` is False (``--quiet``, stderr not a terminal: rich is
    then not even imported, ~0.02 s of a render's start)."""

    def __init__(self, fps: int, total_frames: int | None, enabled: bool = True):
        self.fps = fps
        self.enabled = enabled
        self._bar = None
        if not enabled:
            return
        from rich.console import Console
        from rich.progress import BarColumn, Progress as RichProgress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self._bar = RichProgress(
            TextColumn("[bold]rendering"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total} frames" if total_frames else "{task.completed} frames"),
            TextColumn("{task.fields[chunks]}"),
            TextColumn("{task.fields[speed]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        self._task = self._bar.add_task("render", total=total_frames, chunks="", speed="")

    def __enter__(self) -> RenderProgress:
        if self._bar is not None:
            self._bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)  # type: ignore[arg-type]

    def update(self, progress: Progress) -> None:
        if self._bar is None:
            return
        gen_fps = progress.frames_done / progress.elapsed_s if progress.elapsed_s > 0 else 0.0
        rtf = progress.elapsed_s / (progress.frames_done / self.fps) if progress.frames_done else 0.0
        self._bar.update(
            self._task,
            completed=progress.frames_done,
            total=progress.total_frames or self._bar.tasks[0].total,
            chunks=f"N {progress.n_chunks_done} I {progress.i_chunks_done}",
            speed=f"{gen_fps:.1f} fps, RTF {rtf:.2f}",
        )
