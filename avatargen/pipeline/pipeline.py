"""The Pipeline: the one chunk engine. It runs a family's steps over the N/I chunk schedule and owns the rolling state.

Batch mode (an audio file) and streaming mode (an open-ended iterator of audio blocks) are the same code path: the
pipeline only ever sees an iterator of blocks, and the schedule consumes N spans as the audio arrives. What a family
plugs in (its N chunk, I chunk, hand-over and frames, and its part of a resume point) is in
avatargen/pipeline/family.py; everything else is here, once: replay on resume, stop checks, resume points, emission
in timeline order (inline or overlapped on a second thread), progress and stats.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from avatargen.io.sink import FrameSink
from avatargen.pipeline.audio_timeline import AudioTimeline
from avatargen.pipeline.checkpoint import RenderCheckpoint
from avatargen.pipeline.family import ChunkRun, ChunkSteps, PlacedModels
from avatargen.pipeline.run import RenderRun
from avatargen.pipeline.overlap import EmitThread, split_threads
from avatargen.pipeline.schedule import Emit, IChunk, NChunk, Step
from avatargen.pipeline.state import RollingState
from avatargen.pipeline.stats import Progress, RenderStats, check_finite
from avatargen.runtime.memory import process_trimmer
from avatargen.threads import set_torch_thread_count, torch_thread_count

__all__ = ["Pipeline", "Progress", "RenderRun", "RenderStats", "check_finite"]


class Pipeline:
    """A family's chunk steps over its placed models, run over the N/I chunk schedule into frame sinks.

    ``overlap``: every segment after the first leaves (its ``prepare`` and ``frames``, the sinks) on a second thread
    while this one generates the next chunks (avatargen/pipeline/overlap.py). ``sample_rate`` and ``fps``: the
    model's audio rate and frame rate (``model.sample_rate``, ``model.fps``)."""

    def __init__(self, steps: ChunkSteps, models: PlacedModels, sample_rate: int, fps: int, overlap: bool = False):
        self.sample_rate, self.fps = sample_rate, fps
        self.steps = steps
        self.models = models
        self.overlap = overlap
        self.schedule = steps.schedule
        self.stats = RenderStats()

    def render(self, reference_rgb: np.ndarray, audio_blocks: Iterable[np.ndarray], sinks: Sequence[FrameSink],
               prompt: str = "", run: RenderRun | None = None) -> RenderStats:  # fmt: skip
        """Render the whole audio stream into ``sinks`` as ``run`` asks (``RenderRun``: inputs, resume point, hooks);
        returns timing and counts. With several audio tracks ``audio_blocks`` are (n, tracks) arrays. When
        ``run.should_stop`` says so the render returns early with ``stopped`` set, every frame it emitted already
        handed to the sinks. With ``overlap`` every segment after the first reaches the sinks (and the progress and
        checkpoint hooks) from a second thread, in the same order, while this one generates the next chunks.
        """
        run = run if run is not None else RenderRun()
        resume, should_stop, checkpoints, on_checkpoint = run.resume, run.should_stop, run.checkpoints, run.on_checkpoint
        started = time.perf_counter()
        self.stats = stats = RenderStats(seams=[] if run.record_seams else None)
        with stats.timed("init"):
            chunk_run = self.steps.start(reference_rgb, prompt, stats, run.read_box, run.inputs)
        audio = AudioTimeline(audio_blocks, self.sample_rate, self.fps, self.steps.audio_context_frames)
        state = RollingState()
        skip = 0
        if resume is not None:
            resume = resume.to(self.steps.device)  # read on the CPU; joined with activations on the device
            state, skip = resume.state, resume.steps
            chunk_run.restore(*resume.family_state)
            stats.frames = stats.resumed_from = resume.frames
            stats.n_chunks, stats.i_chunks = resume.n_chunks, resume.i_chunks
        emit = _Emission(chunk_run, stats, sinks, started, run.on_progress, on_checkpoint)
        handed = stats.frames  # frames handed over to be emitted (they reach the sinks in order, maybe later)
        # With overlap the first segment of a render runs here with every thread (it sets the time to the first
        # frame), every step after it with the threads split. A resumed render splits them from its start, so each
        # step runs with the threads it had in the render it continues. (torch's threads: a render whose steps run no
        # model is never overlapped, and imports no torch.)
        threads = torch_thread_count() if self.overlap else 1
        prepare_may_move = self.overlap and _shares_threads_evenly(threads)  # see the hand-over below
        emitter = _start_emitter(threads) if self.overlap and resume is not None else None
        schedule = self.schedule
        spans = audio.spans(schedule.n_chunk_frames, schedule.first_chunk_frames)
        try:
            for number, step in enumerate(schedule.steps(spans)):
                if isinstance(step, NChunk):  # no step from here on reads audio this far back
                    audio.release_before(step.start - self.steps.audio_history_frames)
                if number < skip:
                    _replay(step, stats)
                    continue
                if (should_stop is not None and should_stop()) or chunk_run.stream_ended():
                    stats.stopped = True
                    break
                if isinstance(step, NChunk):
                    chunk_run.n_chunk(step, audio, state)
                    stats.n_chunks += 1
                elif isinstance(step, IChunk):
                    chunk_run.i_chunk(step, audio, state)
                    stats.i_chunks += 1
                else:
                    segment = chunk_run.hand_over(step, state)
                    handed += step.end - step.start
                    finished = audio.total_frames is not None and handed >= audio.total_frames  # nothing left to resume
                    checkpoint_at = None
                    if step.source == "N" and checkpoints is not None and on_checkpoint is not None and checkpoints.contains(handed) and not finished:
                        checkpoint_at = (number + 1, stats.n_chunks, stats.i_chunks, state.snapshot())
                    if prepare_may_move and emitter is not None and emitter.behind():
                        segment = chunk_run.prepare(segment, step)  # the emitting thread has a segment waiting: help it
                    job = partial(emit, step, segment, checkpoint_at, audio.total_frames)
                    if emitter is None:
                        job()
                        if self.overlap:
                            emitter = _start_emitter(threads)
                    else:
                        emitter.submit(job)
            if emitter is not None:
                emitter.drain()
            chunk_run.finish()
        finally:
            if emitter is not None:
                emitter.close(cancel=True)  # after drain() nothing waits; after an error the rest is dropped
                set_torch_thread_count(threads)
        stats.wall_s = time.perf_counter() - started
        return stats


class _Emission:
    """One segment out: its frames to every sink, then its bookkeeping (stats, progress, the resume point after it)."""

    def __init__(self, run: ChunkRun, stats: RenderStats, sinks: Sequence[FrameSink], started: float,
                 on_progress: Callable[[Progress], None] | None,
                 on_checkpoint: Callable[[RenderCheckpoint], None] | None):  # fmt: skip
        self.run, self.stats, self.sinks, self.started = run, stats, list(sinks), started
        self.on_progress, self.on_checkpoint = on_progress, on_checkpoint
        self.trim = process_trimmer()  # freed memory back to the OS after segments: RSS stays flat over hours

    def __call__(self, step: Emit, segment: Any, checkpoint_at: tuple[int, int, int, RollingState] | None,
                 total_frames: int | None) -> None:  # fmt: skip
        """``checkpoint_at``: the steps, chunk counts and rolling state when the segment was handed over."""
        stats = self.stats
        frames_of = self.run.frames(segment, step)
        while True:
            frames = next(frames_of, None)  # (t, H, W, 3) uint8; the family times its own work
            if frames is None:
                break
            with stats.timed("publish"):
                for sink in self.sinks:
                    sink.write(frames)
            if stats.ttff_s is None:
                stats.ttff_s = time.perf_counter() - self.started
        if stats.seams is not None and step.start > 0:
            stats.seams.append(step.start)
        stats.frames += step.end - step.start
        self.trim()
        if self.on_progress:
            elapsed = time.perf_counter() - self.started
            self.on_progress(Progress(stats.frames, stats.n_chunks, stats.i_chunks, total_frames, elapsed))
        if checkpoint_at is not None and self.on_checkpoint is not None:
            steps, n_chunks, i_chunks, state = checkpoint_at
            self.on_checkpoint(RenderCheckpoint(stats.frames, steps, n_chunks, i_chunks, state, self.run.save()))


def _replay(step: Step, stats: RenderStats) -> None:
    """A step before the resume point: nothing runs; only the seams are recorded."""
    if isinstance(step, Emit) and stats.seams is not None and step.start > 0:
        stats.seams.append(step.start)


def _shares_threads_evenly(threads: int) -> bool:
    """Both threads of an overlapped render have the same intra-op thread count, so ``prepare`` gives the same
    result on either (with an odd count it would not: then it stays on the emitting thread)."""
    generating, emitting = split_threads(threads)
    return generating == emitting


def _start_emitter(threads: int) -> EmitThread:
    generating, emitting = split_threads(threads)
    set_torch_thread_count(generating)
    return EmitThread(emitting)
