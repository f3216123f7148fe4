"""The Wan pipeline: InfiniteTalk's long-video loop on avatargen's schedule, with constant memory.

Each N chunk is one clip of the model's length (``clip_frames``, 81 for InfiniteTalk): its first ``motion_frames``
(9) frames are the last frames already generated, re-encoded by the VAE and pinned, and the rest (72) are new. The
first clip is conditioned as InfiniteTalk does it: on the reference as one given frame (its latent pinned, the I2V
mask marking only the first frame), so all its 81 frames are shown, the first being the reference through the VAE.
Frames leave per clip, decoded by one VAE stream
carried from clip to clip: the decoder sees the first clip's latents, then each later clip's new latents only, as
one continuous video (four frames per latent frame), so nothing is decoded twice and the decode never holds more
than one latent frame's activations. Between clips only the motion frames and the decoder's causal past survive,
so host and device memory do not grow with the duration. No I chunks: seams are continuous by construction (the
motion frames), and ``pipeline.interpolate`` does not apply.
"""

from __future__ import annotations

import time
from typing import Callable, Iterable, Sequence

import numpy as np
import torch
from einops import rearrange
from torch import Tensor
from torch.utils import _pytree as pytree

from avatargen.config.schema import Config
from avatargen.pipeline.audio_timeline import AudioTimeline
from avatargen.pipeline.pipeline import Progress, RenderStats, check_finite
from avatargen.pipeline.checkpoint import RenderCheckpoint
from avatargen.pipeline.schedule import CheckpointGrid, ChunkSchedule
from avatargen.pipeline.state import LatentWindow, RollingState
from avatargen.pipeline.wan_build import WanModelSet
from avatargen.models.vae import DecoderCache
from avatargen.models.wan.vae import VAEStream
from avatargen.runtime.memory import trim_host_memory
from avatargen.stages.decode_publish import FrameSink
from avatargen.stages.wan_context import WanContextStage, WanReference
from avatargen.stages.wan_sampler import Guidance, WanSamplerStage


def match_colours(video: Tensor, reference: Tensor) -> Tensor:
    """``video`` (1, 3, T, H, W) with each channel's mean and standard deviation moved to the reference image's
    (1, 3, 1, H, W): the colour drift of long videos corrected against the reference (``model.wan.color_correction``)."""
    dims = (2, 3, 4)
    mean, std = video.mean(dims, keepdim=True), video.std(dims, keepdim=True)
    ref_mean, ref_std = reference.mean(dims, keepdim=True), reference.std(dims, keepdim=True)
    return ((video - mean) / (std + 1e-5) * ref_std + ref_mean).clamp(-1.0, 1.0)


def to_uint8(video: Tensor) -> np.ndarray:
    """(1, 3, t, H, W) in [-1, 1] -> (t, H, W, 3) uint8."""
    frames = rearrange(video, "1 c t h w -> t h w c")
    return frames.add(1.0).mul(127.5).round().clamp(0, 255).to(torch.uint8).cpu().numpy()


class WanPipeline:
    """Context -> clip sampling -> streamed VAE decode -> sinks, one clip per N chunk (see the module docstring)."""

    def __init__(self, config: Config, models: WanModelSet):
        self.config = config
        self.models = models
        wan, spec = config.model.wan, models.spec
        self.clip_frames, self.motion_frames = spec.clip_frames, spec.motion_frames
        # The first clip shows all its frames (one given: the reference), each later one its frames after the motion.
        self.schedule = ChunkSchedule(self.clip_frames - self.motion_frames, self.motion_frames, False, 0, 0,
                                      first_chunk_frames=self.clip_frames)  # fmt: skip
        context_frames = round(wan.audio_context_s * config.model.fps)
        self.context = WanContextStage(
            spec, models.audio_encoder, models.text_encoder, models.image_encoder, models.vae, models.tokenizer,
            config.seed, config.model.fps, context_frames,
        )  # fmt: skip
        guidance = Guidance(wan.text_guide_scale, wan.audio_guide_scale)
        self.sampler = WanSamplerStage(models.dit, wan.sampling_steps, wan.sampling_shift, guidance)
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
    ) -> RenderStats:
        """Render the whole audio stream into ``sinks`` (the same contract as ``Pipeline.render``).

        A resume point (``on_checkpoint``, at the frames of ``checkpoints``) is taken after a clip: the next clip's
        motion frames and the decoder's causal past, both bounded by one clip.
        """
        started = time.perf_counter()
        self.stats = stats = RenderStats(seams=[] if record_seams else None)
        wan = self.config.model.wan
        with self.stats.timed("init"):
            reference = self.context.encode_reference(reference_rgb, prompt, wan.negative_prompt)
            check_finite(reference.condition, "Wan VAE", "encoding the reference image")
            check_finite(reference.text, "umT5 text encoder", "encoding the prompt")
            check_finite(reference.clip_tokens, "CLIP image encoder", "encoding the reference image")
        audio = AudioTimeline(audio_blocks, self.config.model.sample_rate, self.config.model.fps, self.context.context_frames)
        motion = reference.image  # (1, 3, 1, H, W): the first clip's one given frame
        stream: VAEStream | None = None
        skip = 0
        if resume is not None:
            resume = resume.to(self.models.vae.device)
            motion, stream, skip = self._restore(resume, reference)
            stats.frames = stats.resumed_from = resume.frames
            stats.n_chunks = resume.n_chunks
        for span in audio.spans(self.schedule.n_chunk_frames, self.schedule.first_chunk_frames):
            release = span.end - self.motion_frames - self.context.context_frames  # the next clip's first audio
            if span.index < skip:  # before the resume point: nothing runs, the audio buffer stays bounded
                if stats.seams is not None and span.start > 0:
                    stats.seams.append(span.start)
                audio.release_before(release)
                continue
            if should_stop is not None and should_stop():
                stats.stopped = True
                break
            motion, stream = self._clip(span.index, span.start, span.end, reference, audio, motion, stream, sinks)
            stats.n_chunks += 1
            if stats.ttff_s is None:
                stats.ttff_s = time.perf_counter() - started
            if stats.seams is not None and span.start > 0:
                stats.seams.append(span.start)
            stats.frames += span.end - span.start
            audio.release_before(release)
            trim_host_memory()
            if on_progress:
                on_progress(Progress(stats.frames, stats.n_chunks, 0, audio.total_frames, time.perf_counter() - started))
            finished = audio.total_frames is not None and stats.frames >= audio.total_frames
            if checkpoints is not None and on_checkpoint is not None and checkpoints.contains(stats.frames) and not finished:
                on_checkpoint(self._checkpoint(span.index, span.end, stats.frames, stats.n_chunks, motion, stream))
        stats.wall_s = time.perf_counter() - started
        return stats

    def _clip(self, index: int, start: int, end: int, reference: WanReference, audio: AudioTimeline, motion: Tensor,
              stream: VAEStream | None, sinks: Sequence[FrameSink]) -> tuple[Tensor, VAEStream]:  # fmt: skip
        """Generate clip ``index`` (timeline frames [start - g, start - g + clip_frames), ``g`` = the given frames:
        the reference for the first clip, 1 frame at timeline frame 0; the motion frames for the others), send
        frames [start, end) to the sinks; returns the next clip's motion frames and the decoder stream."""
        m = self.motion_frames
        first = stream is None
        window_start = start if first else start - m
        with self.stats.timed("context"):
            window_audio = self.context.audio_windows(audio, window_start, window_start + self.clip_frames)  # (1, F, 5, L, C)
            check_finite(window_audio, "wav2vec2 audio encoder", f"in clip {index}")
            with self.models.vae.active() as vae:
                motion_latents, _ = vae.encode(motion)  # (1, z, 1 + (g - 1) / 4, h, w): a new stream per clip
            latent_frames = reference.condition.shape[2]
            noise = self.context.noise(index, (1, motion_latents.shape[1], latent_frames, *motion_latents.shape[3:]))
        with self.stats.timed("a2v"):
            latents = self.sampler.sample(reference, window_audio, motion_latents, noise)  # (1, z, T, h, w)
        check_finite(latents, "Wan DiT", f"in clip {index}")
        # The decoder stream is one video: the first clip whole (its given frame is frame 0), then only new latents.
        new_latents = latents if first else latents[:, :, motion_latents.shape[2] :]
        parts = []
        with self.stats.timed("decode"), self.models.vae.active() as vae:
            for k in range(new_latents.shape[2]):  # one latent frame of activations at a time
                video, stream = vae.decode(new_latents[:, :, k : k + 1], stream)  # (1, 3, 1 or 4, H, W)
                parts.append(video)
        video = torch.cat(parts, dim=2)  # (1, 3, clip_frames or clip_frames - m, H, W): one clip, bounded
        del parts
        check_finite(video, "Wan VAE", f"decoding clip {index}")
        if self.config.model.wan.color_correction:
            video = match_colours(video, reference.image)
        with self.stats.timed("publish"):
            frames = to_uint8(video[:, :, : end - start])  # the last clip stops where the audio does
            for sink in sinks:
                sink.write(frames)
        motion = video[:, :, -m:].clone()  # (1, 3, m, H, W): the next clip starts from the frames just shown
        return motion, stream

    # -- resume points ---------------------------------------------------------------------------------------------

    def _checkpoint(self, index: int, end: int, frames: int, n_chunks: int, motion: Tensor, stream: VAEStream) -> RenderCheckpoint:
        """The state after clip ``index``: its last frames (the next motion frames) and the decoder's past (its
        tensors in tree order; the tree's shape is the VAE's, rebuilt on resume)."""
        leaves, _ = pytree.tree_flatten(stream.past)
        state = RollingState(n_windows={index: LatentWindow(end - self.motion_frames, motion)})
        past = DecoderCache(frames=[leaf for leaf in leaves if leaf is not None])
        return RenderCheckpoint(frames, index + 1, n_chunks, 0, state, past)

    def _restore(self, resume: RenderCheckpoint, reference: WanReference) -> tuple[Tensor, VAEStream, int]:
        """(motion frames, decoder stream, clips to skip) from a resume point."""
        (window,) = resume.state.n_windows.values()
        latent = reference.condition[:, 4:, :1]  # (1, z, 1, h, w): any latent frame gives the past's tree shape
        with self.models.vae.active() as vae:
            _, template = vae.decode(latent)
        leaves, spec = pytree.tree_flatten(template.past)
        saved = iter(resume.decoder_cache.frames if resume.decoder_cache is not None else [])
        past = pytree.tree_unflatten([None if leaf is None else next(saved) for leaf in leaves], spec)
        latents = reference.condition.shape[2]
        seen = latents + (resume.n_chunks - 1) * (latents - 1 - (self.motion_frames - 1) // self.models.spec.vae.temporal_stride)
        return window.latents, VAEStream(past=past, frames_seen=seen), resume.steps
