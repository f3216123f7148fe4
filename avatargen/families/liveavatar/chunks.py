"""LiveAvatar's chunk steps: its causal block loop on avatargen's N-chunk schedule (the engine,
avatargen/pipeline/pipeline.py, runs them).

**A block is an N chunk.** Each N chunk is ``frames_per_block`` latent frames (3: 12 video frames), sampled in 4
Euler steps. Step i of block n is one function, :meth:`LiveAvatarRun.denoise_step`, of (block latents, i, ring i):
it runs the DiT over ring i, writing the block's keys into it, and moves the latents one step. The four rings are the
reference's four per-step KV caches; they share one cond cache, filled once by the sink forward in ``start`` (the
reference latent and the reference repeated as 73 motion frames). A ring holds one clip's latent frames
(``clip_frames`` / 4: 12 for 48) and rolls when full, so memory is the same at any length.

**What differs from the reference's loop, and why** (docs/liveavatar.md): each block's noise is drawn from (seed, block),
not per clip; the reference's unseeded ``random.randint(4, 30)`` (the reference image's RoPE distance, drawn every
forward) comes from (seed, block, step), so a render is reproducible and a resumed one bit-exact; the blocks' latents
are decoded as they arrive through one VAE decode stream that first decoded the motion latents (the reference decodes
each 48-frame clip behind the re-encoded last 73 frames it showed, after the clip is done).

**Resume.** A resume point after block n holds the four rings (the family's part) and the decoder's past; the cond
cache and the motion stream are recomputed by ``start`` (deterministic), so ``--resume`` continues bit-exact.
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
from avatargen.pipeline.schedule import ChunkSchedule, Emit, NChunk
from avatargen.pipeline.state import LatentWindow, RollingState
from avatargen.pipeline.stats import check_finite
from avatargen.runtime.memory import map_large_allocations

MOTION_VIDEO_FRAMES = 73  # the reference's motion_frames: the reference repeated, 19 latent frames
SHIFT = 3.0


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

    def start(self, reference_rgb: np.ndarray, prompt: str, stats: Any, read_box: Any, inputs: Any = None) -> "LiveAvatarRun":
        map_large_allocations()  # freed activations leave at once: the peak does not depend on the duration
        return LiveAvatarRun(self, reference_rgb, prompt, stats)


class LiveAvatarRun(ChunkRun):
    """One render: the cond cache, four KV rings, the decoder stream."""

    def __init__(self, chunks: LiveAvatarChunks, reference_rgb: np.ndarray, prompt: str, stats: Any):
        self.chunks, self.stats = chunks, stats
        models, model = chunks.models, chunks.config.model
        self.seed = chunks.config.seed
        self.audio = BlockAudio(models.audio_encoder, model.sample_rate, model.fps, chunks.audio_context_frames)
        with torch.inference_mode():
            image = pixels_to_unit_range(reference_rgb, chunks.device)  # (1, 3, 1, H, W)
            with models.vae.active() as vae:
                ref_latents = vae.encode(image.expand(-1, -1, 5, -1, -1))[0][:, :, 1:]  # the reference's [:, :, 1:]
                motion = vae.encode(image.expand(-1, -1, MOTION_VIDEO_FRAMES, -1, -1))[0]  # (1, z, 19, h, w)
                _, self.stream = vae.decode(motion)  # the decoder's past: the motion frames, as the reference decodes
            check_finite(ref_latents, "Wan VAE", "encoding the reference image")
            ids, mask = models.tokenizer(prompt)
            with models.text_encoder.active() as umt5:
                states = umt5(ids.to(chunks.device), mask.to(chunks.device))[:, : int(mask.sum())].float()
            with models.dit.active() as dit:
                p = dit.params
                dtype = dit.patch_embedding.weight.dtype
                self.text = dit.embed_text(states.to(dtype))
                ring = chunks.ring_latent_frames * (ref_latents.shape[-2] // 2) * (ref_latents.shape[-1] // 2)
                self.rings = [KVCache.empty(p.num_layers, ring, p.num_heads, p.head_dim, dtype, chunks.device)
                              for _ in range(len(chunks.timesteps))]  # fmt: skip
                dit.sink(ref_latents.to(dtype), motion[:, :, -MOTION_LATENTS:].to(dtype), self.text, self.rings[0])
                for other in self.rings[1:]:
                    other.share_cond(self.rings[0])
        self.latent_shape = (1, p.in_dim, chunks.latent_frames, *ref_latents.shape[-2:])

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
        chunks = self.chunks
        with self.stats.timed("context"):
            features = self.audio.features(audio, step.start, step.start + chunks.block_frames)
        latents = self.noise(step.index)
        with self.stats.timed("a2v"), chunks.models.dit.active() as dit:
            for i in range(len(chunks.timesteps)):
                latents = self.denoise_step(dit, latents, i, step.index, features)
        check_finite(latents, "LiveAvatar DiT", f"block {step.index}")
        state.n_windows[step.index] = LatentWindow(step.start, latents)

    def hand_over(self, step: Emit, state: RollingState) -> tuple[Tensor, int]:
        window = state.n_windows.pop(step.index)
        return window.latents, step.end - step.start

    @torch.inference_mode()
    def frames(self, segment: tuple[Tensor, int], step: Emit) -> Iterator[np.ndarray]:
        latents, count = segment
        with self.chunks.models.vae.active() as vae:
            video, self.stream = vae.decode(latents.float(), self.stream)  # (1, 3, 4 * frames, H, W)
        yield to_uint8(video[:, :, :count])

    def save(self) -> tuple[dict[str, Tensor], dict[str, Any]]:
        tensors: dict[str, Tensor] = {}
        for i, ring in enumerate(self.rings):
            tensors |= {f"ring{i}.{k}": v for k, v in ring.state().items()}
        past = [leaf for leaf in pytree.tree_flatten(self.stream.past)[0] if leaf is not None]
        tensors |= {f"decoder_past.{k}": leaf.cpu() for k, leaf in enumerate(past)}
        return tensors, {"decoder_past": len(past), "frames_seen": self.stream.frames_seen, "rings": len(self.rings)}

    @torch.inference_mode()
    def restore(self, tensors: dict[str, Tensor], meta: dict[str, Any]) -> None:
        if int(meta.get("rings", -1)) != len(self.rings):
            raise ResumeMismatchError("the resume point holds another number of KV rings than this model's steps")
        for i, ring in enumerate(self.rings):
            ring.load({"k": tensors[f"ring{i}.k"], "v": tensors[f"ring{i}.v"]})
        leaves, spec = pytree.tree_flatten(self.stream.past)
        saved = iter(tensors[f"decoder_past.{k}"].to(self.chunks.device) for k in range(int(meta["decoder_past"])))
        past = pytree.tree_unflatten([None if leaf is None else next(saved) for leaf in leaves], spec)
        self.stream = VAEStream(past=past, frames_seen=int(meta["frames_seen"]))
