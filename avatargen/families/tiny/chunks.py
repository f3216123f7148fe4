"""The bundled family's chunk steps: ContextGen -> A2V for N and I chunks, then SR -> streaming decode for each
segment that leaves (the engine, avatargen/pipeline/pipeline.py, runs them over the N/I schedule).

An N chunk's A2V window is its ``motion_frames`` given frames (the previous N chunk's last latents, clean and held
fixed), then its own frames; an I chunk's is its anchors on both sides of the seam around the seam, the anchors'
predictions discarded. The rolling state holds the N windows at their low resolution; a segment is upscaled (SR) and
decoded only when it leaves, through one decoder stream whose causal cache is the render's output-side state.

Where ``runtime.quantize`` resolved to int8, N chunk 0 and the SR of the first segment (the frames before the first
seam: the time to the first frame) still run the DiTs' float linear layers, and every later chunk and segment their
int8 copies (``TinyModelSet.fast``): int8 kernels' first calls, on all threads, cost that path more than they save
(AVX2 emulated: first frame 0.535 against 0.46 s). The rule is by timeline position, so a resumed render, which starts
after the first segment, computes every frame as the render it continues.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import torch
from torch import Tensor

from avatargen.config.schema import Config
from avatargen.families.tiny.build import TinyModelSet
from avatargen.families.tiny.config import TinyModelConfig
from avatargen.families.tiny.plan import chunk_schedule
from avatargen.families.tiny.models.vae import DecoderCache
from avatargen.families.tiny.stages import A2VStage, ContextGenStage, DecodeRegion, ReferenceContext, SRStage, StreamingDecodeStage
from avatargen.pipeline.audio_timeline import AudioTimeline
from avatargen.pipeline.family import ChunkRun
from avatargen.pipeline.schedule import Emit, IChunk, NChunk
from avatargen.pipeline.state import LatentWindow, RollingState
from avatargen.pipeline.stats import RenderStats, check_finite
from avatargen.runtime.memory import keep_freed_heap


@dataclass
class Segment:
    """The latents of frames about to leave (low resolution), and the SR of its first frames once ``prepare`` ran."""

    latents: Tensor  # (1, C, T, h, w)
    upscaled: Tensor | None = None  # (1, C, t, H, W): frames 0..t-1 upscaled (t: about half the segment)


class TinyChunks:
    """The bundled family's steps over its five placed modules (``ChunkSteps``)."""

    def __init__(self, config: Config, models: TinyModelSet, composited: bool | None = None):
        model = config.model
        assert isinstance(model, TinyModelConfig)
        self.config, self.model, self.models = config, model, models
        p = config.pipeline
        self.schedule = chunk_schedule(config, composited)
        self.context = ContextGenStage(models.audio_encoder, models.text_encoder, models.vae, config.seed,
                                       model.text_encoder.max_tokens, (model.vae, model.text_encoder, model.image_size),
                                       lookahead_frames=p.audio_lookahead_frames)  # fmt: skip
        self.a2v = A2VStage(models.a2v, p.sampling_shift)  # N chunk 0's
        self.sr = SRStage(models.sr, max_batch_frames=4)  # the first segment's
        self.device = models.a2v.device
        self.audio_context_frames = self.context.lookahead_frames
        # Before an N chunk's start its own motion frames and the next seam's left anchors hear the audio.
        self.audio_history_frames = self.schedule.tail_frames + self.context.context_frames

    def a2v_stage(self, first: bool) -> A2VStage:
        """A2V for N chunk 0 (``first``) or any later chunk (see the module docstring)."""
        int8 = self.models.precision.quantization.int8
        return A2VStage(self.models.fast("a2v"), self.a2v.shift) if int8 and not first else self.a2v

    def sr_stage(self, first: bool) -> SRStage:
        """SR for the first segment's frames (``first``) or any later segment's."""
        int8 = self.models.precision.quantization.int8
        return SRStage(self.models.fast("sr"), self.sr.max_batch_frames) if int8 and not first else self.sr

    def start(self, reference_rgb: np.ndarray, prompt: str, stats: RenderStats,
              read_box: tuple[int, int, int, int] | None, inputs: Any = None) -> "TinyRun":  # fmt: skip
        keep_freed_heap()  # the next segment reuses this one's freed tensors' memory: no page faults between trims
        reference = self.context.encode_reference(reference_rgb, prompt)
        check_finite(reference.ref_high, "VAE", "encoding the reference image")
        check_finite(reference.ref_low, "VAE", "encoding the reference image")
        check_finite(reference.text, "text encoder", "encoding the prompt")
        region = None
        if read_box is not None:
            latent_size = self.model.sr.high_size
            region = DecodeRegion.around(read_box, self.model.image_size // latent_size, latent_size)
        return TinyRun(self, reference, stats, StreamingDecodeStage(self.models.vae, region=region))


class TinyRun(ChunkRun):
    """One render of the bundled family: its reference conditioning and its decoder stream."""

    def __init__(self, chunks: TinyChunks, reference: ReferenceContext, stats: RenderStats, decoder: StreamingDecodeStage):
        self.chunks, self.reference, self.stats, self.decoder = chunks, reference, stats, decoder
        self.emitted = False  # the render's first frame goes through SR and the decoder alone (time to first frame)

    # -- generation ------------------------------------------------------------------------------------------------

    def _generate(self, kind: str, index: int, window: tuple[int, int], given: list[tuple[int, Tensor]], audio: AudioTimeline) -> LatentWindow:
        """Run A2V over timeline frames ``window`` with ``given`` (start frame, latents) pieces held fixed."""
        chunks, a2v = self.chunks, self.chunks.model.a2v
        start, end = window
        shape = (1, a2v.latent_channels, end - start, a2v.latent_size, a2v.latent_size)
        with self.stats.timed("context"):
            features = chunks.context.audio_features(audio, start, end)  # (1, T, D_audio)
            check_finite(features, "audio encoder", f"in {kind} chunk {index}")
            noise = chunks.context.noise(kind, index, shape)  # (1, C, T, h, w)
            given_latents = torch.zeros(shape, device=noise.device)
            given_mask = torch.zeros((1, end - start), dtype=torch.bool, device=noise.device)
            for piece_start, latents in given:
                a = piece_start - start
                given_latents[:, :, a : a + latents.shape[2]] = latents
                given_mask[:, a : a + latents.shape[2]] = True
        with self.stats.timed("a2v"):
            steps = chunks.config.pipeline.sampling_steps
            stage = chunks.a2v_stage(first=kind == "N" and index == 0)
            latents = stage.generate(self.reference, features, given_latents, given_mask, noise, steps)
        check_finite(latents, "A2V", f"in {kind} chunk {index}")
        return LatentWindow(start, latents)

    def n_chunk(self, step: NChunk, audio: AudioTimeline, state: RollingState) -> None:
        given = []
        if step.cond_start < step.start:
            given.append((step.cond_start, state.n_windows[step.index - 1].frames(step.cond_start, step.start)))
        window = self._generate("N", step.index, step.window, given, audio)
        state.n_windows[step.index] = LatentWindow(step.start, window.frames(step.start, step.end))
        state.n_windows.pop(step.index - 2, None)

    def i_chunk(self, step: IChunk, audio: AudioTimeline, state: RollingState) -> None:
        left, right = state.n_windows[step.index], state.n_windows[step.index + 1]
        given = [
            (step.left_start, left.frames(step.left_start, step.seam_start)),
            (step.seam_end, right.frames(step.seam_end, step.right_end)),
        ]
        window = self._generate("I", step.index, step.window, given, audio)
        # The anchors' predictions are discarded: only the seam survives.
        state.i_window = LatentWindow(step.seam_start, window.frames(step.seam_start, step.seam_end))
        state.i_index = step.index
        del state.n_windows[step.index]

    def hand_over(self, step: Emit, state: RollingState) -> Segment:
        """The latents of the segment ``step`` emits; the rolling state then lets go of what later steps do not read."""
        window = state.window(step.source, step.index)
        latents = window.frames(step.start, step.end)  # (1, C, T, h, w)
        if step.source == "I":
            state.i_window = None
        else:  # only the tail that later motion frames and anchors read survives the chunk
            state.n_windows[step.index] = window.keep_last(self.chunks.schedule.tail_frames)
        return Segment(latents)

    # -- output ----------------------------------------------------------------------------------------------------

    def _upscale(self, latents: Tensor, step: Emit) -> Tensor:
        """SR of a segment's latents: (1, C, t, h, w) -> (1, C, t, H, W)."""
        with self.stats.timed("sr"):
            high = self.chunks.sr_stage(first=step.start == 0).upscale(self.reference, latents)
        check_finite(high, "SR", f"in frames {step.start}-{step.end}")
        return high

    def prepare(self, segment: Segment, step: Emit) -> Segment:
        """SR of the segment's first SR batches, about half its frames, on the generating thread: moving a whole
        segment's SR there made that thread the slower one on 2 cores. Whole SR batches, so the frames are the same
        whichever thread upscales which (SR runs frame by frame, and int8 quantises each batch's input alone)."""
        if segment.upscaled is not None:
            return segment
        total, batch = segment.latents.shape[2], self.chunks.sr.max_batch_frames
        share = min(total, max(batch, total // 2 // batch * batch))
        return Segment(segment.latents, self._upscale(segment.latents[:, :, :share], step))

    def _high(self, segment: Segment, start: int, end: int, step: Emit) -> Tensor:
        """The upscaled latents of the segment's frames [start, end): (1, C, end - start, H, W)."""
        done = 0 if segment.upscaled is None else segment.upscaled.shape[2]
        pieces = [] if start >= done else [segment.upscaled[:, :, start : min(end, done)]]
        if end > max(start, done):
            pieces.append(self._upscale(segment.latents[:, :, max(start, done) : end], step))
        return pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=2)

    def frames(self, segment: Segment, step: Emit) -> Iterator[np.ndarray]:
        """SR (where ``prepare`` did not) -> decode, a micro-batch of uint8 frames (t, S, S, 3) at a time."""
        total = segment.latents.shape[2]
        parts = [(0, total)]
        if not self.emitted and total > 1:
            # The render's first frame goes through SR and the decoder alone, so it reaches the sinks before the rest
            # of its segment is upscaled (the same frames: SR is per frame, the decoder causal).
            parts = [(0, 1), (1, total)]
        self.emitted = True
        for start, end in parts:
            high = self._high(segment, start, end, step)  # (1, C, t, H, W)
            decoded = self.decoder.decode(high, check=lambda video: check_finite(video, "VAE", f"decoding frames {step.start}-{step.end}"))
            while True:
                with self.stats.timed("decode"):
                    frames = next(decoded, None)  # (t, S, S, 3) uint8
                if frames is None:
                    break
                yield frames

    def save(self) -> tuple[dict[str, Tensor], dict[str, Any]]:
        cache = self.decoder.cache
        frames = cache.frames if cache is not None else []
        return {f"decoder_cache.{k}": f for k, f in enumerate(frames)}, {"decoder_cache": len(frames)}

    def restore(self, tensors: dict[str, Tensor], meta: dict[str, Any]) -> None:
        count = int(meta["decoder_cache"])
        cache = DecoderCache(frames=[tensors[f"decoder_cache.{k}"] for k in range(count)]) if count else None
        self.decoder.resume_from(cache, self.chunks.model.sr.high_size)
        self.emitted = True
