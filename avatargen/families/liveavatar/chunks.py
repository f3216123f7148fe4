"""LiveAvatar's chunk steps: its causal block loop on avatargen's N-chunk schedule (the engine,
avatargen/pipeline/pipeline.py, runs them).

**A block is an N chunk.** Each N chunk is ``frames_per_block`` latent frames (3: 12 video frames), sampled in 4
Euler steps. Step i of block n is one function, :meth:`LiveAvatarRun.denoise_step`, of (block latents, i, ring i):
it runs the DiT over ring i, writing the block's keys into it, and moves the latents one step. The four rings are the
reference's four per-step KV caches; they share one cond cache, filled once by the sink forward in ``start`` (the
reference latent and the last 19 latents of the reference repeated as 365 motion frames, as the reference encodes
them). A ring holds one clip's latent frames
(``clip_frames`` / 4: 12 for 48) and rolls when full, so memory is the same at any length.

**What differs from the reference's loop, and why** (docs/liveavatar.md): each block's noise is drawn from (seed, block),
not per clip; the reference's unseeded ``random.randint(4, 30)`` (the reference image's RoPE distance, drawn every
forward) comes from (seed, block, step), so a render is reproducible and a resumed one bit-exact; the blocks' latents
are decoded as they arrive through one VAE decode stream that first decoded the motion latents (the reference decodes
each 48-frame clip behind the re-encoded last 73 frames it showed, after the clip is done).

**Resume.** A resume point after block n holds the four rings (the family's part) and the decoder's past; the cond
cache and the motion stream are recomputed by ``start`` (deterministic), so ``--resume`` continues bit-exact.

**A pipeline of steps** (``runtime.pipeline_parallel``, avatargen/runtime/pipeline_parallel.py). Each rank runs the
engine over the same schedule, holds the rings of its own steps only, and runs only those: the first stage makes each
block's noise and audio features and sends them on with the latents, the last (rank 0) decodes. At a block whose end
is a checkpoint frame every other stage sends a copy of its rings, taken right after that block, to rank 0, so its
resume point is the one a single process saves (and resumes in one process, or on any number of stages).
"""

from __future__ import annotations

import random
from typing import Any, Iterator

import numpy as np
import torch
from torch import Tensor
from torch.utils import _pytree as pytree

from avatargen.errors import ResumeMismatchError
from avatargen.families.liveavatar.audio import BlockAudio
from avatargen.families.liveavatar.build import LiveAvatarModels
from avatargen.families.liveavatar.config import LiveAvatarConfig
from avatargen.families.liveavatar.models.framepack import MOTION_LATENTS
from avatargen.families.liveavatar.models.kv_cache import KVCache
from avatargen.families.liveavatar.schedule import euler_step, flow_schedule
from avatargen.families.wan.chunks import to_uint8
from avatargen.families.wan.framing import pixels_to_unit_range
from avatargen.families.wan.models.vae import VAEStream
from avatargen.pipeline.family import ChunkRun
from avatargen.pipeline.schedule import ChunkSchedule, Emit, NChunk, checkpoint_grid
from avatargen.pipeline.state import LatentWindow, RollingState
from avatargen.pipeline.stats import check_finite
from avatargen.runtime.memory import map_large_allocations
from avatargen.runtime.pipeline_parallel import StageLink, StepLayout

# The reference's motion latents: its 5-frame reference tensor repeated motion_frames (73) times, 365 frames encoded
# into 92 latents, of which FramePack reads the last 19 and whose decode precedes the first clip's. The causal VAE
# forgets how a video began within ~22 latents, so the last 30 latents of 205 frames (52 latents) are those of the 365,
# bit for bit, and decoding those 30 leaves the decoder where decoding all 92 does (tests/models/liveavatar/
# test_block_loop.py holds both against the reference's construction), for 56 % of its encoding.
MOTION_VIDEO_FRAMES = 205
MOTION_DECODE_LATENTS = 30
SHIFT = 3.0


def motion_latents(vae: Any, image: Tensor, decode: bool) -> tuple[Tensor, VAEStream | None]:
    """The reference's motion latents of ``image`` (1, 3, 1, H, W) and, with ``decode``, a decoder stream that has
    decoded them as the reference does before its first clip (the constants' comment says how)."""
    motion = vae.encode(image.expand(-1, -1, MOTION_VIDEO_FRAMES, -1, -1))[0]  # (1, z, 52, h, w)
    stream = vae.decode(motion[:, :, -MOTION_DECODE_LATENTS:])[1] if decode else None
    return motion, stream


def reference_offset(seed: int, block: int, step: int) -> int:
    """The reference image's RoPE distance (4..30) for step ``step`` of block ``block``: seeded, so reproducible."""
    return random.Random((seed * 1_000_003 + block) * 8 + step).randint(4, 30)


class LiveAvatarChunks:
    """LiveAvatar's steps over its placed modules (``ChunkSteps``; see the module docstring)."""

    def __init__(self, config: Any, models: LiveAvatarModels, composited: bool | None = None):
        model = config.model
        assert isinstance(model, LiveAvatarConfig)
        self.config, self.models = config, models
        la = model.liveavatar
        self.latent_frames = la.frames_per_block
        self.block_frames = 4 * la.frames_per_block
        self.schedule = ChunkSchedule(self.block_frames, 0, False, seam_frames=4, anchor_frames=4)
        self.device = models.vae.device
        self.audio_context_frames = round(la.audio_context_s * model.fps)
        self.audio_history_frames = self.audio_context_frames
        self.ring_latent_frames = la.clip_frames // 4
        self.timesteps, self.sigmas = flow_schedule(la.sampling_steps, SHIFT)
        self.stage = models.stage  # None: every step here
        steps = len(self.timesteps)
        self.own_steps = StepLayout(steps, self.stage.stages).steps_of(self.stage.stage) if self.stage else range(steps)
        self.decodes = self.stage is None or self.stage.next is None
        # The frames after which the session saves a resume point (render/session.py, start_encoder): every stage
        # knows them, so each sends its rings' copy at the same blocks as the last one receives them.
        self.grid = checkpoint_grid(self.schedule, max(1, round(model.fps * config.output.gop_seconds)))
        audio = models.audio_encoder.model.config
        # BlockAudio's (1, layers, C, frames): every hidden state (the embeddings' and each layer's) at each frame
        self.feature_shape = (1, audio.num_hidden_layers + 1, audio.hidden_size, self.block_frames)

    def start(self, reference_rgb: np.ndarray, prompt: str, stats: Any, read_box: Any, inputs: Any = None) -> "LiveAvatarRun":
        map_large_allocations()  # freed activations leave at once: the peak does not depend on the duration
        return LiveAvatarRun(self, reference_rgb, prompt, stats)


class LiveAvatarRun(ChunkRun):
    """One render: the cond cache, four KV rings (a pipeline stage: its steps' only), the decoder stream."""

    def __init__(self, chunks: LiveAvatarChunks, reference_rgb: np.ndarray, prompt: str, stats: Any):
        self.chunks, self.stats = chunks, stats
        models, model = chunks.models, chunks.config.model
        self.seed = chunks.config.seed
        self.audio = BlockAudio(models.audio_encoder, model.sample_rate, model.fps, chunks.audio_context_frames)
        self.stream: VAEStream | None = None  # the decoder's (on the stage that decodes)
        with torch.inference_mode():
            image = pixels_to_unit_range(reference_rgb, chunks.device)  # (1, 3, 1, H, W)
            with models.vae.active() as vae:
                ref_latents = vae.encode(image.expand(-1, -1, 5, -1, -1))[0][:, :, 1:]  # the reference's [:, :, 1:]
                motion, self.stream = motion_latents(vae, image, decode=chunks.decodes)
            check_finite(ref_latents, "Wan VAE", "encoding the reference image")
            ids, mask = models.tokenizer(prompt)
            with models.text_encoder.active() as umt5:
                states = umt5(ids.to(chunks.device), mask.to(chunks.device))[:, : int(mask.sum())].float()
            with models.dit.active() as dit:
                p = dit.params
                dtype = dit.patch_embedding.weight.dtype
                self.text = dit.embed_text(states.to(dtype))
                ring = chunks.ring_latent_frames * (ref_latents.shape[-2] // 2) * (ref_latents.shape[-1] // 2)
                self.rings = {i: KVCache.empty(p.num_layers, ring, p.num_heads, p.head_dim, dtype, chunks.device)
                              for i in chunks.own_steps}  # fmt: skip  # this stage's steps' rings only
                first, *others = self.rings.values()
                dit.sink(ref_latents.to(dtype), motion[:, :, -MOTION_LATENTS:].to(dtype), self.text, first)
                for other in others:
                    other.share_cond(first)
        self.latent_shape = (1, p.in_dim, chunks.latent_frames, *ref_latents.shape[-2:])
        shapes = [self.latent_shape, chunks.feature_shape]  # what a block carries to the next stage
        self.link = StageLink(chunks.stage, shapes, chunks.device) if chunks.stage else None
        self.snapshot: tuple[int, dict[int, dict[str, Tensor]]] | None = None  # (block, the other stages' rings)
        self.handed = -1  # the last block handed over to be decoded (a resume point is saved after it)

    def noise(self, block: int) -> Tensor:
        """Block ``block``'s seeded noise."""
        generator = torch.Generator().manual_seed((self.seed * 1_000_003 + block) % 2**63)
        return torch.randn(self.latent_shape, generator=generator).to(self.chunks.device)

    def denoise_step(self, dit: Any, latents: Tensor, step: int, block: int, audio: Tensor) -> Tensor:
        """Step ``step`` of block ``block``: a function of (latents, step, ring ``step``) that writes the block's keys
        into that ring (one rank per step can hold its ring: timestep-forcing pipeline parallelism)."""
        chunks = self.chunks
        t = chunks.timesteps[step]
        dtype = dit.patch_embedding.weight.dtype
        velocity = dit.block(latents.to(dtype), t, self.text, audio.to(dtype), self.rings[step],
                             block * chunks.latent_frames, reference_offset(self.seed, block, step))  # fmt: skip
        return euler_step(latents, velocity, chunks.sigmas[step], chunks.sigmas[step + 1])

    @torch.inference_mode()
    def n_chunk(self, step: NChunk, audio: Any, state: RollingState) -> None:
        chunks, link = self.chunks, self.link
        if link is None or link.first:
            with self.stats.timed("context"):
                features = self.audio.features(audio, step.start, step.start + chunks.block_frames)
            latents = self.noise(step.index)
        else:
            received = link.receive(step.index)  # (latents, features) after the earlier stages' steps
            if received is None:
                return  # the first stage stopped before this block: the engine stops here (stream_ended)
            latents, features = received  # (1, 16, F, h, w), (1, layers, C, 4 * F)
        with self.stats.timed("a2v"), chunks.models.dit.active() as dit:
            for i in chunks.own_steps:
                latents = self.denoise_step(dit, latents, i, step.index, features)
        check_finite(latents, "LiveAvatar DiT", f"block {step.index}")
        checkpointed = link is not None and chunks.grid.contains(step.end)
        if link is not None and not link.last:
            link.send(step.index, [latents, features])
            if checkpointed:  # the rings as they are after this block, for rank 0's resume point
                link.send_snapshot([t for i in chunks.own_steps for t in self.rings[i].state().values()])
            return
        if checkpointed:
            self.snapshot = (step.index, self._receive_snapshots())
        state.n_windows[step.index] = LatentWindow(step.start, latents)

    def _receive_snapshots(self) -> dict[int, dict[str, Tensor]]:
        """On the last stage: every other stage's rings after the block it just finished, by step."""
        link, chunks = self.link, self.chunks
        assert link is not None
        like = next(iter(self.rings.values())).state()  # every step's ring has the same shape
        layout = StepLayout(len(chunks.timesteps), link.ranks.stages)
        rings: dict[int, dict[str, Tensor]] = {}
        for stage in range(link.ranks.stages - 1):
            steps = layout.steps_of(stage)
            received = iter(link.receive_snapshot(stage, [t for _ in steps for t in like.values()]))
            rings |= {i: {name: next(received) for name in like} for i in steps}
        return rings

    def hand_over(self, step: Emit, state: RollingState) -> tuple[Tensor | None, int]:
        window = state.n_windows.pop(step.index, None)  # None on a stage that does not decode
        self.handed = step.index
        return (window.latents if window is not None else None), step.end - step.start

    @torch.inference_mode()
    def frames(self, segment: tuple[Tensor | None, int], step: Emit) -> Iterator[np.ndarray]:
        latents, count = segment
        if latents is None:
            return  # another rank decodes this block
        with self.chunks.models.vae.active() as vae:
            video, self.stream = vae.decode(latents.float(), self.stream)  # (1, 3, 4 * frames, H, W)
        yield to_uint8(video[:, :, :count])

    def stream_ended(self) -> bool:
        return self.link is not None and self.link.ended

    def finish(self) -> None:
        if self.link is not None:
            self.link.finish()

    def save(self) -> tuple[dict[str, Tensor], dict[str, Any]]:
        assert self.stream is not None, "the stage that decodes saves the resume point"
        others: dict[int, dict[str, Tensor]] = {}
        if len(self.rings) < len(self.chunks.timesteps):  # a pipeline's last stage: the others' rings came to it
            assert self.snapshot is not None and self.snapshot[0] == self.handed, "no ring snapshot of this block"
            others = self.snapshot[1]
        tensors: dict[str, Tensor] = {}
        for i in range(len(self.chunks.timesteps)):
            state = self.rings[i].state() if i in self.rings else others[i]
            tensors |= {f"ring{i}.{k}": v for k, v in state.items()}
        past = [leaf for leaf in pytree.tree_flatten(self.stream.past)[0] if leaf is not None]
        tensors |= {f"decoder_past.{k}": leaf.cpu() for k, leaf in enumerate(past)}
        meta = {"decoder_past": len(past), "frames_seen": self.stream.frames_seen, "rings": len(self.chunks.timesteps)}
        return tensors, meta

    @torch.inference_mode()
    def restore(self, tensors: dict[str, Tensor], meta: dict[str, Any]) -> None:
        if int(meta.get("rings", -1)) != len(self.chunks.timesteps):
            raise ResumeMismatchError("the resume point holds another number of KV rings than this model's steps")
        for i, ring in self.rings.items():
            ring.load({"k": tensors[f"ring{i}.k"], "v": tensors[f"ring{i}.v"]})
        if self.stream is None:
            return  # a stage that does not decode
        leaves, spec = pytree.tree_flatten(self.stream.past)
        saved = iter(tensors[f"decoder_past.{k}"].to(self.chunks.device) for k in range(int(meta["decoder_past"])))
        past = pytree.tree_unflatten([None if leaf is None else next(saved) for leaf in leaves], spec)
        self.stream = VAEStream(past=past, frames_seen=int(meta["frames_seen"]))
