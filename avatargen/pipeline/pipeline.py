"""The Pipeline: links the stages, owns the rolling state and runs the chunk schedule.

Batch mode (an audio file) and streaming mode (an open-ended iterator of audio blocks) are the same code path: the
pipeline only ever sees an iterator of blocks, and the schedule consumes N spans as the audio arrives.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np
import torch
from torch import Tensor

from avatargen.config.schema import Config
from avatargen.errors import AvatarGenError
from avatargen.pipeline.audio_timeline import AudioTimeline
from avatargen.pipeline.build import ModelSet
from avatargen.pipeline.schedule import ChunkSchedule, Emit, IChunk, NChunk
from avatargen.pipeline.state import LatentWindow, RollingState
from avatargen.stages import A2VStage, ContextGenStage, DecodeAndPublishStage, FrameSink, ReferenceContext, SRStage


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
    stage_s: dict[str, float] = field(default_factory=lambda: {"init": 0.0, "context": 0.0, "a2v": 0.0, "sr": 0.0, "decode": 0.0, "publish": 0.0})


class NonFiniteError(AvatarGenError):
    """A model produced NaN or Inf; the render stops rather than write garbage."""


def schedule_from_config(config: Config) -> ChunkSchedule:
    p = config.pipeline
    return ChunkSchedule(p.n_chunk_frames, p.motion_frames, p.interpolate, p.seam_frames, p.anchor_frames)


class Pipeline:
    """ContextGen -> A2V -> SR -> DecodeAndPublish over the N/I chunk schedule."""

    def __init__(self, config: Config, models: ModelSet):
        self.config = config
        self.models = models
        self.schedule = schedule_from_config(config)
        self.context = ContextGenStage(
            models.audio_encoder, models.text_encoder, models.vae, config.seed, config.model.text_encoder.max_tokens
        )
        self.a2v = A2VStage(models.a2v, config.pipeline.sampling_steps, config.pipeline.sampling_shift)
        self.sr = SRStage(models.sr, max_batch_frames=4)
        self.stats = RenderStats()

    @contextmanager
    def _timed(self, stage: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.stats.stage_s[stage] += time.perf_counter() - start

    def render(
        self,
        reference_rgb: np.ndarray,
        audio_blocks: Iterable[np.ndarray],
        sinks: Sequence[FrameSink],
        prompt: str = "",
        on_progress: Callable[[Progress], None] | None = None,
        record_seams: bool = False,
    ) -> RenderStats:
        """Render the whole audio stream into ``sinks``; returns timing and counts.

        ``record_seams`` keeps the frame index of every chunk seam (one int per chunk) for seam metrics.
        """
        started = time.perf_counter()
        self.stats = stats = RenderStats(seams=[] if record_seams else None)
        with self._timed("init"):
            reference = self.context.encode_reference(reference_rgb, prompt)
        audio = AudioTimeline(
            audio_blocks, self.config.model.sample_rate, self.config.model.fps, self.context.context_frames
        )
        publisher = DecodeAndPublishStage(self.models.vae, sinks)
        state = RollingState()
        for step in self.schedule.steps(audio.spans(self.schedule.n_chunk_frames)):
            if isinstance(step, NChunk):
                self._run_n_chunk(step, reference, audio, state)
                stats.n_chunks += 1
            elif isinstance(step, IChunk):
                self._run_i_chunk(step, reference, audio, state)
                stats.i_chunks += 1
            else:
                self._emit(step, reference, state, publisher, audio)
                if stats.ttff_s is None:
                    stats.ttff_s = time.perf_counter() - started
                if stats.seams is not None and step.start > 0:
                    stats.seams.append(step.start)
                stats.frames += step.end - step.start
                if on_progress:
                    on_progress(Progress(stats.frames, stats.n_chunks, stats.i_chunks, audio.total_frames, time.perf_counter() - started))
        stats.wall_s = time.perf_counter() - started
        return stats

    def _latent_shape(self, frames: int) -> tuple[int, ...]:
        a2v = self.config.model.a2v
        return (1, a2v.latent_channels, frames, a2v.latent_size, a2v.latent_size)

    def _generate(
        self, kind: str, index: int, window: tuple[int, int], given: list[tuple[int, Tensor]], reference: ReferenceContext, audio: AudioTimeline
    ) -> LatentWindow:
        """Run A2V over timeline frames ``window`` with ``given`` (start frame, latents) pieces held fixed."""
        start, end = window
        shape = self._latent_shape(end - start)
        with self._timed("context"):
            features = self.context.audio_features(audio, start, end)  # (1, T, D_audio)
            noise = self.context.noise(kind, index, shape)  # (1, C, T, h, w)
            given_latents = torch.zeros(shape, device=noise.device)
            given_mask = torch.zeros((1, end - start), dtype=torch.bool, device=noise.device)
            for piece_start, latents in given:
                a = piece_start - start
                given_latents[:, :, a : a + latents.shape[2]] = latents
                given_mask[:, a : a + latents.shape[2]] = True
        with self._timed("a2v"):
            latents = self.a2v.generate(reference, features, given_latents, given_mask, noise)
        if not torch.isfinite(latents).all():
            raise NonFiniteError(f"the A2V model produced NaN/Inf in {kind} chunk {index}; the checkpoint is broken or mismatched, re-create it")
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

    def _emit(self, step: Emit, reference: ReferenceContext, state: RollingState, publisher: DecodeAndPublishStage, audio: AudioTimeline) -> None:
        window = state.window(step.source, step.index)
        with self._timed("sr"):
            high = self.sr.upscale(reference, window.frames(step.start, step.end))  # (1, C, T, H, W)
        if not torch.isfinite(high).all():
            raise NonFiniteError(f"the SR model produced NaN/Inf in frames {step.start}-{step.end}; the checkpoint is broken or mismatched")
        decoded = publisher.decode(high)
        while True:
            with self._timed("decode"):
                frames = next(decoded, None)  # (t, S, S, 3) uint8
            if frames is None:
                break
            with self._timed("publish"):
                publisher.publish(frames)
        if step.source == "I":
            state.i_window = None
        else:
            # Only the tail that later motion frames and anchors read survives the chunk.
            state.n_windows[step.index] = window.keep_last(self.schedule.tail_frames)
            audio.release_before(window.end - self.schedule.tail_frames - self.context.context_frames)
