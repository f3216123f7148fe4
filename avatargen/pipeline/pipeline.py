"""The Pipeline: links the stages, owns the rolling state and runs the chunk schedule.

Batch mode (an audio file) and streaming mode (an open-ended iterator of audio blocks) are the same code path: the
pipeline only ever sees an iterator of blocks, and the schedule consumes N spans as the audio arrives.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np
import torch
from torch import Tensor

from avatargen.config.schema import Config, interpolates, motion_frames_for
from avatargen.errors import NonFiniteError
from avatargen.pipeline.audio_timeline import AudioTimeline
from avatargen.pipeline.build import ModelSet
from avatargen.pipeline.checkpoint import RenderCheckpoint
from avatargen.pipeline.overlap import EmitThread, split_threads
from avatargen.pipeline.schedule import CheckpointGrid, ChunkSchedule, Emit, IChunk, NChunk
from avatargen.pipeline.state import LatentWindow, RollingState
from avatargen.runtime.memory import trim_host_memory
from avatargen.stages import A2VStage, ContextGenStage, DecodeAndPublishStage, FrameSink, ReferenceContext, SRStage
from avatargen.stages.decode_publish import DecodeRegion


@dataclass
class Progress:
    """Reported after every emitted segment."""

    frames_done: int
    n_chunks_done: int
    i_chunks_done: int
    total_frames: int | None  # known once the audio has ended (or from a duration hint given to the caller)
    elapsed_s: float


@dataclass
class RenderStats:
    """What one render did and how long each stage took."""

    frames: int = 0
    n_chunks: int = 0
    i_chunks: int = 0
    ttff_s: float | None = None  # from render start to the first frame handed to the sinks
    wall_s: float = 0.0
    seams: list[int] | None = None  # first frame of every emitted segment after the first (when recorded)
    stopped: bool = False  # should_stop() said so: the render ended early, after a whole step
    resumed_from: int = 0  # the frame a resumed render started at (0: from the start)
    stage_s: dict[str, float] = field(default_factory=lambda: {"init": 0.0, "context": 0.0, "a2v": 0.0, "sr": 0.0, "decode": 0.0, "publish": 0.0})

    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        """Add the wall time of the ``with`` body to ``stage_s[stage]`` (from either thread of an overlapped render)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            with self._lock:
                self.stage_s[stage] += time.perf_counter() - start


__all__ = ["NonFiniteError", "Pipeline", "Progress", "RenderStats", "schedule_from_config"]


def check_finite(tensor: Tensor, module: str, where: str) -> None:
    """Stop the render, naming the module, rather than write garbage: NaN/Inf come from a broken checkpoint."""
    if not torch.isfinite(tensor).all():
        raise NonFiniteError(
            f"the {module} model produced NaN/Inf {where}; its checkpoint is broken or mismatched: re-create or re-copy it"
        )


def schedule_from_config(config: Config) -> ChunkSchedule:
    p = config.pipeline
    return ChunkSchedule(p.n_chunk_frames, motion_frames_for(config), interpolates(config), p.seam_frames, p.anchor_frames)


class Pipeline:
    """ContextGen -> A2V -> SR -> DecodeAndPublish over the N/I chunk schedule."""

    def __init__(self, config: Config, models: ModelSet, overlap: bool = False):
        self.config = config
        self.overlap = overlap  # emit segments on a second thread while the next chunks generate (overlap.py)
        self.models = models
        self.schedule = schedule_from_config(config)
        self.context = ContextGenStage(
            models.audio_encoder, models.text_encoder, models.vae, config.seed, config.model.text_encoder.max_tokens
        )
        self.a2v = A2VStage(models.a2v, config.pipeline.sampling_shift)
        self.sr = SRStage(models.sr, max_batch_frames=4)
        self.stats = RenderStats()

    def render(
        self,
        reference_rgb: np.ndarray,
        audio_blocks: Iterable[np.ndarray],
        sinks: Sequence[FrameSink],
        prompt: str = "",
        on_progress: Callable[[Progress], None] | None = None,
        record_seams: bool = False,
        resume: RenderCheckpoint | None = None,
        checkpoints: CheckpointGrid | None = None,
        on_checkpoint: Callable[[RenderCheckpoint], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
        read_box: tuple[int, int, int, int] | None = None,
    ) -> RenderStats:
        """Render the whole audio stream into ``sinks``; returns timing and counts.

        ``record_seams`` keeps the frame index of every chunk seam (one int per chunk) for seam metrics.
        ``resume`` continues from a checkpoint: the sinks then receive the frames after ``resume.frames`` only.
        ``on_checkpoint`` receives the state at every frame of ``checkpoints`` (the tensors are not copied: save them
        before returning). ``should_stop`` is asked between steps (never inside one): when it says so the render
        returns early with ``stopped`` set, every frame it emitted already handed to the sinks.
        ``read_box`` (y0, y1, x0, x1), in model-frame pixels, is all the sinks read of each frame (None: the whole
        frame): only that part, and a margin around it, is decoded; the frames' other pixels are zero.
        With ``overlap`` every segment after the first reaches the sinks (and ``on_progress``, ``on_checkpoint``)
        from a second thread, in the same order, while this one generates the next chunks.
        """
        started = time.perf_counter()
        self.stats = stats = RenderStats(seams=[] if record_seams else None)
        with self.stats.timed("init"):
            reference = self.context.encode_reference(reference_rgb, prompt)
            check_finite(reference.ref_high, "VAE", "encoding the reference image")
            check_finite(reference.ref_low, "VAE", "encoding the reference image")
            check_finite(reference.text, "text encoder", "encoding the prompt")
        audio = AudioTimeline(
            audio_blocks, self.config.model.sample_rate, self.config.model.fps, self.context.context_frames
        )
        publisher = DecodeAndPublishStage(self.models.vae, sinks, region=self._decode_region(read_box))
        state = RollingState()
        skip = 0
        if resume is not None:
            resume = resume.to(self.models.a2v.device)  # read on the CPU; joined with activations on the device
            state, skip = resume.state, resume.steps
            publisher.resume_from(resume.decoder_cache, self.config.model.sr.high_size)
            stats.frames = stats.resumed_from = resume.frames
            stats.n_chunks, stats.i_chunks = resume.n_chunks, resume.i_chunks
        handed = stats.frames  # frames handed over to be emitted (they reach the sinks in order, maybe later)
        # With overlap the first segment of a render runs here with every thread (it sets the time to the first
        # frame), every step after it with the threads split. A resumed render splits them from its start, so each
        # step runs with the threads it had in the render it continues.
        threads = torch.get_num_threads()
        sr_may_move = self.overlap and self._shares_threads_evenly(threads)  # see the hand-over below
        emitter = self._start_emitter(threads) if self.overlap and resume is not None else None
        try:
            for number, step in enumerate(self.schedule.steps(audio.spans(self.schedule.n_chunk_frames))):
                if number < skip:
                    self._replay(step, audio, stats)
                    continue
                if should_stop is not None and should_stop():
                    stats.stopped = True
                    break
                if isinstance(step, NChunk):
                    self._run_n_chunk(step, reference, audio, state)
                    stats.n_chunks += 1
                elif isinstance(step, IChunk):
                    self._run_i_chunk(step, reference, audio, state)
                    stats.i_chunks += 1
                else:
                    latents = self._hand_over(step, state, audio)
                    handed += step.end - step.start
                    finished = audio.total_frames is not None and handed >= audio.total_frames  # nothing left to resume
                    checkpoint_at = None
                    if step.source == "N" and checkpoints is not None and on_checkpoint is not None and checkpoints.contains(handed) and not finished:
                        checkpoint_at = (number + 1, stats.n_chunks, stats.i_chunks, state.snapshot())
                    upscaled = sr_may_move and emitter is not None and emitter.behind()
                    if upscaled:  # the emitting thread has a segment waiting: this one takes the segment's SR
                        latents = self._upscale(reference, latents, step)
                    job = partial(self._emit, step, latents, upscaled, reference, publisher, started, checkpoint_at,
                                  on_progress, on_checkpoint, audio.total_frames)  # fmt: skip
                    if emitter is None:
                        job()
                        if self.overlap:
                            emitter = self._start_emitter(threads)
                    else:
                        emitter.submit(job)
            if emitter is not None:
                emitter.drain()
        finally:
            if emitter is not None:
                emitter.close(cancel=True)  # after drain() nothing waits; after an error the rest is dropped
                torch.set_num_threads(threads)
        stats.wall_s = time.perf_counter() - started
        return stats

    @staticmethod
    def _shares_threads_evenly(threads: int) -> bool:
        """Both threads of an overlapped render have the same intra-op thread count, so SR gives the same frames on
        either (with an odd count it would not: then it stays on the emitting thread)."""
        generating, emitting = split_threads(threads)
        return generating == emitting

    @staticmethod
    def _start_emitter(threads: int) -> EmitThread:
        generating, emitting = split_threads(threads)
        torch.set_num_threads(generating)
        return EmitThread(emitting)

    def _decode_region(self, read_box: tuple[int, int, int, int] | None) -> DecodeRegion | None:
        if read_box is None:
            return None
        latent_size = self.config.model.sr.high_size
        return DecodeRegion.around(read_box, self.config.model.image_size // latent_size, latent_size)

    def _replay(self, step: NChunk | IChunk | Emit, audio: AudioTimeline, stats: RenderStats) -> None:
        """A step before the resume point: run nothing, only keep the audio buffer bounded and the seams recorded."""
        if isinstance(step, NChunk):
            # Mirrors the release after the previous N body left (at most as far: the state may still read it).
            audio.release_before(step.start - self.schedule.tail_frames - self.context.context_frames)
        elif isinstance(step, Emit) and stats.seams is not None and step.start > 0:
            stats.seams.append(step.start)

    def _latent_shape(self, frames: int) -> tuple[int, ...]:
        a2v = self.config.model.a2v
        return (1, a2v.latent_channels, frames, a2v.latent_size, a2v.latent_size)

    def _generate(
        self, kind: str, index: int, window: tuple[int, int], given: list[tuple[int, Tensor]], reference: ReferenceContext, audio: AudioTimeline
    ) -> LatentWindow:
        """Run A2V over timeline frames ``window`` with ``given`` (start frame, latents) pieces held fixed."""
        start, end = window
        shape = self._latent_shape(end - start)
        with self.stats.timed("context"):
            features = self.context.audio_features(audio, start, end)  # (1, T, D_audio)
            check_finite(features, "audio encoder", f"in {kind} chunk {index}")
            noise = self.context.noise(kind, index, shape)  # (1, C, T, h, w)
            given_latents = torch.zeros(shape, device=noise.device)
            given_mask = torch.zeros((1, end - start), dtype=torch.bool, device=noise.device)
            for piece_start, latents in given:
                a = piece_start - start
                given_latents[:, :, a : a + latents.shape[2]] = latents
                given_mask[:, a : a + latents.shape[2]] = True
        with self.stats.timed("a2v"):
            steps = self.config.pipeline.sampling_steps
            latents = self.a2v.generate(reference, features, given_latents, given_mask, noise, steps)
        check_finite(latents, "A2V", f"in {kind} chunk {index}")
        return LatentWindow(start, latents)

    def _run_n_chunk(self, step: NChunk, reference: ReferenceContext, audio: AudioTimeline, state: RollingState) -> None:
        given = []
        if step.cond_start < step.start:
            given.append((step.cond_start, state.n_windows[step.index - 1].frames(step.cond_start, step.start)))
        window = self._generate("N", step.index, step.window, given, reference, audio)
        state.n_windows[step.index] = LatentWindow(step.start, window.frames(step.start, step.end))
        state.n_windows.pop(step.index - 2, None)

    def _run_i_chunk(self, step: IChunk, reference: ReferenceContext, audio: AudioTimeline, state: RollingState) -> None:
        left, right = state.n_windows[step.index], state.n_windows[step.index + 1]
        given = [
            (step.left_start, left.frames(step.left_start, step.seam_start)),
            (step.seam_end, right.frames(step.seam_end, step.right_end)),
        ]
        window = self._generate("I", step.index, step.window, given, reference, audio)
        # The anchors' predictions are discarded: only the seam survives.
        state.i_window = LatentWindow(step.seam_start, window.frames(step.seam_start, step.seam_end))
        state.i_index = step.index
        del state.n_windows[step.index]

    def _hand_over(self, step: Emit, state: RollingState, audio: AudioTimeline) -> Tensor:
        """The latents of the segment ``step`` emits; the rolling state then lets go of what later steps do not read."""
        window = state.window(step.source, step.index)
        latents = window.frames(step.start, step.end)  # (1, C, T, h, w)
        if step.source == "I":
            state.i_window = None
        else:
            # Only the tail that later motion frames and anchors read survives the chunk.
            state.n_windows[step.index] = window.keep_last(self.schedule.tail_frames)
            audio.release_before(window.end - self.schedule.tail_frames - self.context.context_frames)
        return latents

    def _upscale(self, reference: ReferenceContext, latents: Tensor, step: Emit) -> Tensor:
        """SR of a segment's latents: (1, C, t, h, w) -> (1, C, t, H, W)."""
        with self.stats.timed("sr"):
            high = self.sr.upscale(reference, latents)
        check_finite(high, "SR", f"in frames {step.start}-{step.end}")
        return high

    def _emit(
        self,
        step: Emit,
        latents: Tensor,  # (1, C, T, h, w) the segment's low-resolution latents, or its high ones when ``upscaled``
        upscaled: bool,
        reference: ReferenceContext,
        publisher: DecodeAndPublishStage,
        started: float,
        checkpoint_at: tuple[int, int, int, RollingState] | None,
        on_progress: Callable[[Progress], None] | None,
        on_checkpoint: Callable[[RenderCheckpoint], None] | None,
        total_frames: int | None,
    ) -> None:
        """SR (unless ``upscaled``) -> decode -> sinks for one segment, then its bookkeeping: stats, progress and
        (``checkpoint_at``: the steps, chunk counts and rolling state when it was handed over) the checkpoint after it."""
        stats = self.stats
        parts = [latents]
        if stats.ttff_s is None and stats.resumed_from == 0 and latents.shape[2] > 1:
            # The render's first frame goes through SR and the decoder alone, so it reaches the sinks before the rest
            # of its segment is upscaled (the same frames: SR is per frame, the decoder causal).
            parts = [latents[:, :, :1], latents[:, :, 1:]]
        for part in parts:
            high = part if upscaled else self._upscale(reference, part, step)  # (1, C, t, H, W)
            decoded = publisher.decode(high, check=lambda video: check_finite(video, "VAE", f"decoding frames {step.start}-{step.end}"))
            while True:
                with stats.timed("decode"):
                    frames = next(decoded, None)  # (t, S, S, 3) uint8
                if frames is None:
                    break
                with stats.timed("publish"):
                    publisher.publish(frames)
                if stats.ttff_s is None:
                    stats.ttff_s = time.perf_counter() - started
        if stats.seams is not None and step.start > 0:
            stats.seams.append(step.start)
        stats.frames += step.end - step.start
        trim_host_memory()  # freed tensor memory goes back to the OS: RSS stays flat over hours
        if on_progress:
            on_progress(Progress(stats.frames, stats.n_chunks, stats.i_chunks, total_frames, time.perf_counter() - started))
        if checkpoint_at is not None and on_checkpoint is not None:
            steps, n_chunks, i_chunks, state = checkpoint_at
            on_checkpoint(RenderCheckpoint(stats.frames, steps, n_chunks, i_chunks, state, publisher.cache))
