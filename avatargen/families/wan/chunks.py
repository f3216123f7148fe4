"""The Wan family's chunk steps: InfiniteTalk's long-video loop on avatargen's N/I chunk schedule, with constant
memory (the engine, avatargen/pipeline/pipeline.py, runs them).

**N chunks.** Each N chunk is one clip of the model's length (``clip_frames``, 81 for InfiniteTalk): its first
``motion_frames`` (9) frames are the last frames of the previous clip, re-encoded by the VAE and pinned, and the rest
(72) are new. The first clip is conditioned as InfiniteTalk does it: on the reference as one given frame (its latent
pinned, the I2V mask marking only the first frame), so all its 81 frames are shown, the first being the reference
through the VAE. Every clip's I2V conditioning (mask on frame 0, the latent of [image, black], the CLIP tokens) is
the reference's; when dubbing (``RenderInputs.video``) it is the source frame at the clip's first frame instead,
InfiniteTalk's sparse-frame video-to-video: the motion frames carry the motion on, the source frame every 72 frames
steers the head and body to the source's.

**Two speakers** (``RenderInputs.tracks == 2``): each clip's audio windows are computed per speaker and the DiT
routes them by the speakers' regions (MultiTalk's person masks and label RoPE, models/speakers.py).

**Colour.** Every decoded frame is moved to the reference's Lab statistics (``model.wan.color_correction``,
colour.py) before it is shown, so the next clip's motion frames are the corrected frames, as in the reference.

**I chunks** (``pipeline.interpolate=true``; off by default for Wan models, docs/models.md). The schedule is
``ChunkSchedule``'s: N0 -> N1 -> I0 -> N2 -> I1 -> ... The I chunk of the seam between clips k and k+1 regenerates
``model.wan.seam_frames`` frames (half each side of the boundary) in a window of its own, with the I2V mask given
at both ends (Wan's first-last-frame conditioning): at the start the ``anchor_frames + 1`` frames already shown
before the seam, re-encoded by the VAE as a new stream (as motion frames are); at the end the latents of clip k+1
for the ``anchor_frames`` frames after the seam, taken as they are. Both ends are pinned at every step and their
predictions discarded. The clip's frames [end - seam/2, end) are never shown: the next clip's motion frames among
them are decoded on a fork of the decoder stream (below) and dropped once re-encoded.

**One decoder stream.** Whatever leaves goes through one VAE decode stream carried across the whole video, in
timeline order: the first clip's latents up to its seam, the seam's regenerated latents, the next clip's latents
after the seam, and so on. Every piece is whole 4-frame latent steps on the same grid (clip boundaries, seam halves
and anchors are multiples of 4 frames past frame 0), so the decoder sees one continuous latent video, each latent
frame exactly once, and its causal cache always holds the past of the frames just shown: a replaced latent (the
clip's own version of a seam) never enters it. The motion frames inside a seam are decoded by passing the current
cache to ``decode`` and dropping the cache it returns (decode never changes the past it is given), so the main stream
is untouched. Nothing is decoded twice for output, and the decode holds one latent frame of activations at a time.
The decoder stream and the frames shown are the render's output-side state (``WanRun``); the next clip's motion
frames are read from them, so the segments of a Wan render leave inline, never on a second thread.

**Memory.** Between steps only the current and next clip's latents, the last seam's latents, the last
``max(motion_frames, anchor_frames + 1)`` frames shown and the decoder's causal past survive, so host and device
memory do not grow with the duration. Large host allocations are mapped one by one (``map_large_allocations``), so the activations a
step frees go back to the OS at once and the peak is the live tensors', not glibc's heap after its worst segment. A resume point, after a clip's frames up to its seam have left (no seam
pending), holds the clip's latents not yet shown (the engine's part) and the frames shown and the decoder's past (the
family's): ``--resume`` replays the schedule without running it and continues with the same frames.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np
import torch
from einops import rearrange
from torch import Tensor
from torch.utils import _pytree as pytree

from avatargen.config.schema import Config
from avatargen.errors import ResumeMismatchError
from avatargen.families.wan.build import WanModelSet
from avatargen.families.wan.colour import ColourTarget, match_and_blend
from avatargen.families.wan.config import WanAudioFeatures, WanClipCondition, WanConfig, negative_prompt, sampling_shift
from avatargen.families.wan.framing import pixels_to_unit_range
from avatargen.families.wan.latents import packed_latents, packed_window, trimmed
from avatargen.families.wan.models.conditioning import given_latents_mask, person_masks
from avatargen.families.wan.models.vae import VAEStream
from avatargen.families.wan.stages.audio import WanAudioStage
from avatargen.families.wan.stages.context import FrameCondition, WanContextStage, WanReference
from avatargen.families.wan.stages.sampler import Guidance, WanSamplerStage
from avatargen.pipeline.audio_timeline import AudioTimeline
from avatargen.pipeline.family import ChunkRun
from avatargen.pipeline.inputs import RenderInputs
from avatargen.pipeline.schedule import ChunkSchedule, Emit, IChunk, NChunk
from avatargen.pipeline.state import LatentWindow, RollingState
from avatargen.pipeline.stats import RenderStats, check_finite
from avatargen.runtime.memory import map_large_allocations


def to_uint8(video: Tensor) -> np.ndarray:
    """(1, 3, t, H, W) in [-1, 1] -> (t, H, W, 3) uint8."""
    frames = rearrange(video, "1 c t h w -> t h w c")
    return frames.add(1.0).mul(127.5).round().clamp(0, 255).to(torch.uint8).cpu().numpy()


@dataclass
class Segment:
    """The packed latents of frames [step.start, step.end) (whole latent frames: the last may pass the end)."""

    latents: Tensor  # (1, z, t, h, w)


class WanChunks:
    """The Wan family's steps over its five placed modules (``ChunkSteps``; see the module docstring)."""

    def __init__(self, config: Config, models: WanModelSet, composited: bool | None = None):
        model = config.model
        assert isinstance(model, WanConfig)
        self.config, self.models = config, models
        wan, spec = model.wan, models.spec
        self.clip_frames, self.motion_frames = spec.clip_frames, spec.motion_frames
        self.step = spec.vae.temporal_stride  # video frames per latent frame (after a stream's first)
        # The first clip shows all its frames (one given: the reference), each later one its frames after the motion.
        self.schedule = ChunkSchedule(self.clip_frames - self.motion_frames, self.motion_frames, config.pipeline.interpolates(False),
                                      wan.seam_frames, wan.anchor_frames, first_chunk_frames=self.clip_frames)  # fmt: skip
        # Frames shown that later steps read: the next clip's motion frames, the next seam's left anchor.
        self.held_frames = max(self.motion_frames, wan.anchor_frames + 1 if self.schedule.interpolate else 0)
        context_frames = round(wan.audio_context_s * model.fps)
        self.context = WanContextStage(spec, models.text_encoder, models.image_encoder, models.vae, models.tokenizer,
                                       config.seed)  # fmt: skip
        guidance = Guidance(wan.text_guide_scale, wan.audio_guide_scale)
        self.sampler = WanSamplerStage(models.dit, wan.sampling_steps, sampling_shift(model), guidance, models.guidance)
        self.device = models.vae.device
        self.audio_context_frames = context_frames
        # Audio frames before a clip's start that later steps still hear (motion frames, the seam window's start).
        back = max(self.motion_frames, self.schedule.seam_left + wan.anchor_frames + 1 if self.schedule.interpolate else 0)
        # Whole-file features are computed per grid window of feature_window_s: a clip (or a resumed render's first
        # clip) may need its window's audio from the window's start, so that much more is kept (61 s: 3.9 MB).
        window = round(wan.feature_window_s * model.fps) if wan.audio_features == WanAudioFeatures.whole else 0
        self.audio_history_frames = back + context_frames + window

    def start(self, reference_rgb: np.ndarray, prompt: str, stats: RenderStats,
              read_box: tuple[int, int, int, int] | None, inputs: RenderInputs | None = None) -> "WanRun":  # fmt: skip
        map_large_allocations()  # freed tensors leave at once: the peak does not depend on the duration
        model = self.config.model
        wan, inputs = model.wan, inputs or RenderInputs()
        reference = self.context.encode_reference(reference_rgb, prompt, negative_prompt(model))
        check_finite(reference.condition, "Wan VAE", "encoding the reference image")
        check_finite(reference.text, "umT5 text encoder", "encoding the prompt")
        check_finite(reference.clip_tokens, "CLIP image encoder", "encoding the reference image")
        whole_file = wan.audio_features == WanAudioFeatures.whole and inputs.track_stats is not None
        audio = WanAudioStage(self.models.audio_encoder, model.sample_rate, model.fps, wan.audio_features,
                              max(1, round(wan.feature_window_s * model.fps)), self.audio_context_frames,
                              self.clip_frames, inputs.tracks, inputs.track_stats() if whole_file else None)  # fmt: skip
        masks = None
        if inputs.tracks > 1:
            height, width = reference_rgb.shape[:2]
            latent = reference.condition.shape[-2:]
            masks = person_masks(list(inputs.regions), height, width, tuple(latent)).to(self.device)  # (3, h, w)
        return WanRun(self, reference, stats, audio, inputs.video, masks)


class WanRun(ChunkRun):
    """One render of a Wan-family model: its conditioning, its decoder stream and the last frames it showed."""

    def __init__(self, chunks: WanChunks, reference: WanReference, stats: RenderStats, audio: WanAudioStage,
                 video: Any = None, masks: Tensor | None = None):  # fmt: skip
        self.chunks, self.reference, self.stats = chunks, reference, stats
        self.audio, self.video, self.masks = audio, video, masks
        self.step = chunks.step
        self.stream: VAEStream | None = None
        self.shown: LatentWindow | None = None  # pixels (1, 3, held, H, W) of the last frames shown
        strength = chunks.config.model.wan.color_correction
        self.colour = ColourTarget.of(reference.image) if strength > 0 else None
        self._source: tuple[int, FrameCondition] | None = None  # the source frame's conditioning last encoded

    def _frame_condition(self, frame: int, given: Tensor | None = None) -> FrameCondition:
        """The image conditioning of a window that starts at timeline frame ``frame``: the reference's, or when
        dubbing the source video's frame there (encoded once per clip); with ``model.wan.clip_condition=motion``
        (MultiTalk) a clip's own given frames ``given`` (1, 3, m, H, W), its motion frames."""
        if given is not None and self.chunks.config.model.wan.clip_condition == WanClipCondition.motion:
            return self.chunks.context.encode_given(given)
        if self.video is None or frame == 0:
            return self.reference.frame_condition
        if self._source is None or self._source[0] != frame:
            image = pixels_to_unit_range(self.video.frame(frame), self.chunks.device)  # (1, 3, 1, H, W)
            condition = self.chunks.context.encode_given(image)
            check_finite(condition.condition, "Wan VAE", f"encoding source frame {frame}")
            self._source = (frame, condition)
        return self._source[1]

    # -- generation ------------------------------------------------------------------------------------------------

    def _sample(self, kind: str, index: int, start: int, frames: int, audio: AudioTimeline, given: Tensor,
                end: Tensor | None = None, condition: Callable[[Tensor], Tensor] | None = None) -> Tensor:  # fmt: skip
        """Latents (1, z, T, h, w) of the window of ``frames`` video frames from timeline frame ``start`` whose first
        frames are the pixels ``given`` (1, 3, g, H, W) (and last latents ``end``), as InfiniteTalk samples a clip.

        ``condition`` makes the I2V mask and latents from the given frames' latents (default: the reference's)."""
        chunks = self.chunks
        seam = kind == "I"
        where = f"in {'the seam after clip' if seam else 'clip'} {index}"
        with self.stats.timed("context"):
            window_audio = self.audio.windows(audio, start, start + frames)  # (1, [2,] frames, 5, L, C)
            check_finite(window_audio, "wav2vec2 audio encoder", where)
            image = self._frame_condition(start, given if kind == "N" and index > 0 else None)
            with chunks.models.vae.active() as vae:
                given_latents, _ = vae.encode(given)  # (1, z, 1 + (g - 1) / 4, h, w): a new stream per window
            latent_frames = 1 + (frames - 1) // self.step
            noise = chunks.context.noise(index, (1, given_latents.shape[1], latent_frames, *given_latents.shape[3:]), seam=seam)
            mask_and_given = image.condition if condition is None else condition(given_latents)  # seam: both ends
        with self.stats.timed("a2v"):
            latents = chunks.sampler.sample(self.reference, window_audio, given_latents, noise, end=end,
                                            condition=mask_and_given, clip_tokens=image.clip_tokens,
                                            person_masks=self.masks)  # fmt: skip
        check_finite(latents, "Wan DiT", where)
        return latents  # (1, z, T, h, w)

    def n_chunk(self, step: NChunk, audio: AudioTimeline, state: RollingState) -> None:
        """Clip ``step.index``: the reference as its one given frame (the first clip) or the motion frames."""
        if step.index == 0:
            given, start = self.reference.image, step.start  # (1, 3, 1, H, W): frame 0 is the reference
        else:
            given, start = self._motion_frames(step.index - 1, step.start, state), step.start - self.chunks.motion_frames
            state.n_windows.pop(step.index - 1, None)
        latents = self._sample("N", step.index, start, self.chunks.clip_frames, audio, given)
        state.n_windows[step.index] = packed_window(start, latents, self.step)

    def _motion_frames(self, index: int, end: int, state: RollingState) -> Tensor:
        """The last ``motion_frames`` frames of clip ``index`` (ending at ``end``) as the video has them: the frames
        shown, then (with I chunks) the clip's frames not shown, decoded on a fork of the stream."""
        shown = self.shown.latents  # (1, 3, held, H, W), up to the frames left so far
        window = state.n_windows.get(index)
        if self.shown.end < end and window is not None:
            unseen = self._decode(packed_latents(window, self.shown.end, end, self.step), self.stream)[0]
            shown = torch.cat([shown, unseen[:, :, : end - self.shown.end]], dim=2)  # the fork's past is dropped
        return shown[:, :, -self.chunks.motion_frames :]  # (1, 3, m, H, W)

    def i_chunk(self, step: IChunk, audio: AudioTimeline, state: RollingState) -> None:
        """The seam between clips ``step.index`` and ``step.index + 1``, given on both sides (module docstring)."""
        wan = self.chunks.config.model.wan
        anchor, seam_start = wan.anchor_frames, step.seam_start
        seam_end = seam_start + wan.seam_frames  # whole: the last clip's latents go on past the audio's end
        if self.shown.end != seam_start:
            raise RuntimeError(f"seam {step.index} starts at frame {seam_start} but frames up to {self.shown.end} have left")
        left = self.shown.latents[:, :, -(anchor + 1) :]  # (1, 3, anchor + 1, H, W): shown, before the seam
        right = packed_latents(state.n_windows[step.index + 1], seam_end, seam_end + anchor, self.step)  # (1, z, a/4, h, w)
        black = self.reference.condition[:, 4:, -1:]  # (1, z, 1, h, w): the latent of black frames (nothing given)
        seam_latents = wan.seam_frames // self.step

        def condition(left_latents: Tensor) -> Tensor:  # the I2V mask and latents: given at both ends
            given = [True] * left_latents.shape[2] + [False] * seam_latents + [True] * right.shape[2]
            mask = given_latents_mask(given, *left_latents.shape[3:], temporal_stride=self.step).to(left_latents)
            middle = black.expand(-1, -1, seam_latents, -1, -1)
            return torch.cat([mask, torch.cat([left_latents, middle, right], dim=2)], dim=1)  # (1, 4 + z, T, h, w)

        start = seam_start - anchor - 1
        latents = self._sample("I", step.index, start, 1 + 2 * anchor + wan.seam_frames, audio, left,
                               end=right, condition=condition)  # fmt: skip
        state.i_window, state.i_index = packed_window(start, latents, self.step), step.index

    def hand_over(self, step: Emit, state: RollingState) -> Segment:
        """The latents of frames [step.start, step.end) of an N clip or a seam; the state keeps only the clip's
        latents not shown yet (its seam, with I chunks)."""
        window = state.window(step.source, step.index)
        latents = packed_latents(window, step.start, step.end, self.step)
        if step.source == "I":
            state.i_window = None
        else:
            rest = trimmed(window, step.end, self.step)
            if rest is None:
                del state.n_windows[step.index]
            else:
                state.n_windows[step.index] = rest
        return Segment(latents)

    # -- output ----------------------------------------------------------------------------------------------------

    def _decode(self, latents: Tensor, stream: VAEStream | None) -> tuple[Tensor, VAEStream]:
        """Latents -> frames (1, 3, t, H, W) through the decoder stream, one latent frame of activations at a time."""
        parts = []
        with self.stats.timed("decode"), self.chunks.models.vae.active() as vae:
            for k in range(latents.shape[2]):
                video, stream = vae.decode(latents[:, :, k : k + 1], stream)  # (1, 3, 1 or 4, H, W)
                parts.append(video)
        video = torch.cat(parts, dim=2)
        del parts
        check_finite(video, "Wan VAE", "decoding")
        if self.colour is not None:
            with self.stats.timed("colour"):
                video = match_and_blend(video, self.colour, self.chunks.config.model.wan.color_correction)
        return video, stream

    def frames(self, segment: Segment, step: Emit) -> Iterator[np.ndarray]:
        """Frames [step.start, step.end) through the one decoder stream; they become the frames shown."""
        video, self.stream = self._decode(segment.latents, self.stream)
        video = video[:, :, : step.end - step.start]  # whole latent frames; the last one may pass the audio's end
        shown = video if self.shown is None else torch.cat([self.shown.latents, video], dim=2)
        self.shown = LatentWindow(step.end - shown.shape[2], shown).keep_last(self.chunks.held_frames)
        yield to_uint8(video)

    # -- resume points ---------------------------------------------------------------------------------------------

    def save(self) -> tuple[dict[str, Tensor], dict[str, Any]]:
        """The frames shown that later steps read and the decoder's past (its tensors in tree order; the tree's
        shape is the VAE's, rebuilt on resume)."""
        leaves, _ = pytree.tree_flatten(self.stream.past)
        past = [leaf for leaf in leaves if leaf is not None]
        tensors = {"shown": self.shown.latents} | {f"decoder_past.{k}": leaf for k, leaf in enumerate(past)}
        return tensors, {"shown_start": self.shown.start, "decoder_past": len(past), "frames_seen": self.stream.frames_seen}

    def restore(self, tensors: dict[str, Tensor], meta: dict[str, Any]) -> None:
        if "shown_start" not in meta or "shown" not in tensors:
            raise ResumeMismatchError("cannot resume: the resume point was not written by a Wan-family render; "
                                      "render without --resume to start over")  # fmt: skip
        latent = self.reference.condition[:, 4:, :1]  # (1, z, 1, h, w): any latent frame gives the past's tree shape
        with self.chunks.models.vae.active() as vae:
            _, template = vae.decode(latent)
        leaves, spec = pytree.tree_flatten(template.past)
        saved = iter(tensors[f"decoder_past.{k}"] for k in range(int(meta["decoder_past"])))
        past = pytree.tree_unflatten([None if leaf is None else next(saved) for leaf in leaves], spec)
        self.stream = VAEStream(past=past, frames_seen=int(meta["frames_seen"]))
        self.shown = LatentWindow(int(meta["shown_start"]), tensors["shown"])
