"""LiveAvatar's causal Wan2.2-S2V DiT (Alibaba-Quark/LiveAvatar ``causal_model_s2v.CausalWanModel_S2V``).

Tensor names are the reference's, so ``Wan2.2-S2V-14B``'s ``diffusion_pytorch_model-*.safetensors`` load strictly
(with ``liveavatar.safetensors``'s LoRA merged, lora.py). Two forwards, each over one :class:`KVCache`:

- :meth:`LiveAvatarDiT.sink`: the conditioning tokens alone (the reference latent at time 30, the FramePack motion
  tokens before time 0) run through every block with the zero-timestep modulation; each layer keeps their
  unrotated keys and their values as the cond cache. Its output is not used.
- :meth:`LiveAvatarDiT.block`: one block of latent frames at one denoising timestep: its keys and values go into the
  ring at the block's position, its queries attend to the ring and to the cond cache, whose keys are rotated with
  the reference moved ``rollout`` frames later (:func:`reference_rollout`: the reference stays between 4 and 30
  frames ahead of the block). Audio enters after the injector's blocks. Returns the velocity.

Where this port differs from the reference without changing a number it computes: RoPE tables per call (no 45000-row
buffer), no sequence-parallel or training branches, the text padded to ``text_len`` as there.

Block (``blocks.N``), ``e`` the six modulation vectors of each frame::

    x = x + self_attn(norm1(x) * (1 + e1) + e0) * e2          # over [ring, cond cache]
    x = x + cross_attn(norm3(bf16(x)), text)                  # the reference rounds x to bf16 here, also in fp32
    x = x + ffn(norm2(x) * (1 + e4) + e3) * e5
    x = x + audio_injector(x)                                 # after the blocks listed in audio_inject_layers
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from avatargen.families.liveavatar.models.audio import CausalAudioEncoder, AudioInjector
from avatargen.families.liveavatar.models.framepack import FramePacker
from avatargen.families.liveavatar.models.kv_cache import KVCache
from avatargen.families.liveavatar.models.params import LiveAvatarParams
from avatargen.families.liveavatar.models.rope import (
    apply_rope,
    groups_rope,
    motion_groups,
    noisy_group,
    reference_group,
)
from avatargen.families.wan.models.attention import NormedQKVAttention
from avatargen.families.wan.models.dit import fp32_forward
from avatargen.families.wan.models.layers import FP32LayerNorm, timestep_sinusoid
from avatargen.models.sequence import attention

MOTION_VIDEO_FRAMES = 73  # the reference's motion_frames: its audio encoder reads this many copies of a block's first
MOTION_LATENT_FRAMES = 19  # audio frame ahead of the block, and drops this many latent frames of its output


def reference_rollout(first_frame: int, offset: int) -> int:
    """How many frames the reference image's position moves for a block starting at latent frame ``first_frame``,
    with the reference ``offset`` frames ahead (4..30; the reference draws it per forward)."""
    return max(0, first_frame - (30 - offset))


class CausalSelfAttention(NormedQKVAttention):
    """``self_attn``: q/k RMS-normed, RoPE, attending over the KV ring and the cond cache."""

    def _qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return self.queries(x), *self.keys_values(x)

    def sink(self, x: Tensor, rope: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        """Cond tokens (B, Lc, dim) -> (B, Lc, dim), and their unrotated keys and values (B, Lc, H, D)."""
        q, k, v = self._qkv(x)
        out = attention(apply_rope(q, rope).type_as(v), apply_rope(k, rope).type_as(v), v)
        return self.o(out), k, v

    def block(self, x: Tensor, rope: tuple[Tensor, Tensor], cond_rope: tuple[Tensor, Tensor], cache,
              write: int, attend: slice) -> Tensor:
        """A block's tokens (B, L, dim) -> (B, L, dim); writes its rotated keys and values at ring index ``write``."""
        q, k, v = self._qkv(x)
        q, k = apply_rope(q, rope).type_as(v), apply_rope(k, rope).type_as(v)
        cache.k[:, write : write + k.shape[1]] = k
        cache.v[:, write : write + v.shape[1]] = v
        keys = torch.cat([cache.k[:, attend], apply_rope(cache.cond_k, cond_rope).type_as(v)], dim=1)
        values = torch.cat([cache.v[:, attend], cache.cond_v], dim=1)
        return self.o(attention(q, keys, values))


class TextCrossAttention(NormedQKVAttention):
    """``cross_attn``: Wan's text cross-attention with q/k RMS norms."""

    def forward(self, x: Tensor, text: Tensor) -> Tensor:
        """(B, L, dim), (B, Lt, dim) -> (B, L, dim)."""
        return self.o(attention(self.queries(x), *self.keys_values(text)))


class CausalBlock(nn.Module):
    """One block (``blocks.N``); see the module docstring."""

    def __init__(self, p: LiveAvatarParams) -> None:
        super().__init__()
        self.norm3_dtype = getattr(torch, p.norm3_dtype)
        self.norm1 = FP32LayerNorm(p.dim, p.eps, elementwise_affine=False)
        self.self_attn = CausalSelfAttention(p.dim, p.num_heads, p.eps)
        self.norm3 = nn.LayerNorm(p.dim, p.eps, elementwise_affine=True)
        self.cross_attn = TextCrossAttention(p.dim, p.num_heads, p.eps)
        self.norm2 = FP32LayerNorm(p.dim, p.eps, elementwise_affine=False)
        self.ffn = nn.Sequential(nn.Linear(p.dim, p.ffn_dim), nn.GELU(approximate="tanh"), nn.Linear(p.ffn_dim, p.dim))
        self.modulation = nn.Parameter(torch.randn(1, 6, p.dim) / p.dim**0.5)

    def reset_parameters(self) -> None:
        """The reference's ``randn / sqrt(dim)``."""
        nn.init.normal_(self.modulation, std=self.modulation.shape[-1] ** -0.5)

    def forward(self, x: Tensor, time: Tensor, text: Tensor, attend) -> Tensor:
        """``x`` (B, L, dim), ``time`` (B, L, 6, dim) fp32 per token, ``attend`` the self-attention (a closure over
        the cache) -> (B, L, dim)."""
        dtype = x.dtype  # the weights' (the modulation and the residual adds run in fp32, as the reference's autocast)
        shift1, scale1, gate1, shift2, scale2, gate2 = (self.modulation.float() + time).unbind(2)
        x = x + attend((self.norm1(x).float() * (1 + scale1) + shift1).to(dtype)) * gate1
        # the reference normalises x rounded to bf16 (its LayerNorm kernel with bf16 input, fp32 weights), also in fp32:
        # the same call, so the same kernel rounds the same way
        x = x + self.cross_attn(self.norm3(x.to(self.norm3_dtype)).to(self.norm3_dtype).to(dtype), text)
        return (x + self.ffn((self.norm2(x).float() * (1 + scale2) + shift2).to(dtype)) * gate2).to(dtype)


class Head(nn.Module):
    """``head``: per-frame modulated LayerNorm and linear to patch pixels."""

    def __init__(self, p: LiveAvatarParams) -> None:
        super().__init__()
        self.norm = FP32LayerNorm(p.dim, p.eps, elementwise_affine=False)
        self.head = nn.Linear(p.dim, math.prod(p.patch_size) * p.out_dim)
        self.modulation = nn.Parameter(torch.randn(1, 2, p.dim) / p.dim**0.5)

    def reset_parameters(self) -> None:
        """The reference's ``randn / sqrt(dim)``."""
        nn.init.normal_(self.modulation, std=self.modulation.shape[-1] ** -0.5)

    def forward(self, x: Tensor, time: Tensor) -> Tensor:
        """``x`` (B, F, S, dim), ``time`` (B, F, dim) -> (B, F, S, patch * out_dim)."""
        shift, scale = (self.modulation.float()[:, None] + time[:, :, None]).unbind(2)  # (B, F, dim) each
        return fp32_forward(self.head, self.norm(x).float() * (1 + scale[:, :, None]) + shift[:, :, None])


@dataclass
class Conditioning:
    """What every block of a render reads: the prompt's embedded tokens and the cond tokens' count."""

    text: Tensor  # (B, text_len, dim)
    grid: tuple[int, int]  # latent (H, W)


class LiveAvatarDiT(nn.Module):
    """The causal S2V DiT; see the module docstring."""

    def __init__(self, params: LiveAvatarParams) -> None:
        super().__init__()
        params.validate()
        self.params = p = params
        self.patch_embedding = nn.Conv3d(p.in_dim, p.dim, kernel_size=p.patch_size, stride=p.patch_size)
        self.text_embedding = nn.Sequential(nn.Linear(p.text_dim, p.dim), nn.GELU(approximate="tanh"), nn.Linear(p.dim, p.dim))
        self.time_embedding = nn.Sequential(nn.Linear(p.freq_dim, p.dim), nn.SiLU(), nn.Linear(p.dim, p.dim))
        self.time_projection = nn.Sequential(nn.SiLU(), nn.Linear(p.dim, 6 * p.dim))
        self.blocks = nn.ModuleList([CausalBlock(p) for _ in range(p.num_layers)])
        self.head = Head(p)
        self.cond_encoder = nn.Conv3d(p.cond_dim, p.dim, kernel_size=p.patch_size, stride=p.patch_size)
        self.casual_audio_encoder = CausalAudioEncoder(p.audio_dim, p.dim, p.num_audio_token)
        self.audio_injector = AudioInjector(p.dim, p.num_heads, p.audio_inject_layers)
        self.trainable_cond_mask = nn.Embedding(3, p.dim)
        self.frame_packer = FramePacker(p.dim, p.in_dim)

    def block_stacks(self) -> list[nn.ModuleList]:
        """The repeated blocks (``models/structure.py``)."""
        return [self.blocks]

    def _time(self, timesteps: Tensor) -> tuple[Tensor, Tensor]:
        """(N,) timesteps -> embedding (N, dim) and modulation (N, 6, dim), fp32."""
        e = fp32_forward(self.time_embedding, timestep_sinusoid(timesteps, self.params.freq_dim))
        return e, fp32_forward(self.time_projection, e).unflatten(1, (6, self.params.dim))

    def embed_text(self, text: Tensor) -> Tensor:
        """umT5 states (B, Lt, text_dim) -> (B, text_len, dim), zero-padded first as the reference."""
        pad = self.params.text_len - text.shape[1]
        if pad < 0:
            raise ValueError(f"text has {text.shape[1]} tokens; this model takes at most {self.params.text_len}")
        return self.text_embedding(F.pad(text, (0, 0, 0, pad)).to(self.patch_embedding.weight.dtype))

    def _rows_cols(self, height: int, width: int) -> tuple[int, int]:
        return height // self.params.patch_size[1], width // self.params.patch_size[2]

    def sink(self, ref_latents: Tensor, motion_latents: Tensor, text: Tensor, cache: KVCache) -> None:
        """Fill ``cache``'s cond cache: ``ref_latents`` (B, 16, 1, H, W), ``motion_latents`` (B, 16, T, H, W),
        ``text`` from :meth:`embed_text`."""
        rows, cols = self._rows_cols(*ref_latents.shape[-2:])
        ref = self.patch_embedding(ref_latents).flatten(2).transpose(1, 2)  # (B, R, dim)
        motion = self.frame_packer(motion_latents)  # (B, M, dim)
        x = torch.cat([ref + self.trainable_cond_mask.weight[1], motion + self.trainable_cond_mask.weight[2]], dim=1)
        rope = groups_rope([reference_group(0, rows, cols), *motion_groups(rows, cols)], self.params.head_dim)
        _, mod = self._time(torch.zeros(1, device=x.device))
        time = mod[:, None].expand(x.shape[0], x.shape[1], 6, -1)  # (B, Lc, 6, dim)
        for block, layer in zip(self.blocks, cache.layers):
            def attend(h: Tensor, block=block, layer=layer) -> Tensor:
                out, layer.cond_k, layer.cond_v = block.self_attn.sink(h, rope)
                return out
            x = block(x, time, text, attend)

    def block(self, latents: Tensor, timestep: float | Tensor, text: Tensor, audio: Tensor, cache: KVCache,
              first_frame: int, offset: int, pose: Tensor | None = None) -> Tensor:
        """The velocity of one block.

        Args:
            latents: (B, 16, F, H, W) the block's noisy latents.
            timestep: the denoising timestep (0..1000), the same for every frame of the block.
            text: from :meth:`embed_text`.
            audio: (B, 25, audio_dim, 4 * F) wav2vec2 states of the block's video frames.
            cache: this step's cache, its cond cache filled by :meth:`sink`; the block's keys are written into it.
            first_frame: the block's first latent frame counted from the start of the render.
            offset: the reference's distance ahead (4..30; :func:`reference_rollout`).
            pose: (B, cond_dim, F, H, W) pose latents, or None (zeros: the reference's default).

        Returns:
            (B, 16, F, H, W) fp32.
        """
        p = self.params
        b, _, frames, height, width = latents.shape
        rows, cols = self._rows_cols(height, width)
        frame_tokens = rows * cols
        if pose is None:
            pose = latents.new_zeros(b, p.cond_dim, frames, height, width)
        x = self.patch_embedding(latents) + self.cond_encoder(pose)
        x = x.flatten(2).transpose(1, 2) + self.trainable_cond_mask.weight[0]  # (B, L, dim)
        rope = groups_rope([noisy_group(first_frame, frames, rows, cols)], p.head_dim)
        rollout = reference_rollout(first_frame, offset)
        cond_rope = groups_rope([reference_group(rollout, rows, cols), *motion_groups(rows, cols)], p.head_dim)
        write, attend_slots = cache.window(first_frame * frame_tokens, x.shape[1])

        glob, local = self.audio_tokens(audio)
        t = torch.as_tensor(timestep, dtype=torch.float32, device=x.device).reshape(1).expand(frames)
        e, mod = self._time(t)  # (F, dim), (F, 6, dim)
        time = mod.repeat_interleave(frame_tokens, dim=0)[None]  # (1, L, 6, dim)
        for index, (block, layer) in enumerate(zip(self.blocks, cache.layers)):
            def attend(h: Tensor, block=block, layer=layer) -> Tensor:
                return block.self_attn.block(h, rope, cond_rope, layer, write, attend_slots)
            x = block(x, time, text, attend)
            x = self.audio_injector(index, x, local, glob)
        out = self.head(x.unflatten(1, (frames, frame_tokens)), e[None].expand(b, -1, -1))  # (B, F, S, 4*16)
        pt, ph, pw = p.patch_size
        out = out.reshape(b, frames, rows, cols, pt, ph, pw, p.out_dim)
        out = out.permute(0, 7, 1, 4, 2, 5, 3, 6)  # (B, C, F, pt, rows, ph, cols, pw)
        return out.reshape(b, p.out_dim, frames * pt, height, width).float()

    def audio_tokens(self, audio: Tensor) -> tuple[Tensor, Tensor]:
        """A block's wav2vec2 states (B, 25, C, 4F) -> global (B, F, 1, dim) and local (B, F, n, dim): the
        reference's encoder reads 73 copies of the block's first frame before it and drops the first 19 outputs."""
        lead = audio[..., :1].expand(*audio.shape[:-1], MOTION_VIDEO_FRAMES)
        glob, local = self.casual_audio_encoder(torch.cat([lead, audio], dim=-1))  # fp32
        dtype = self.patch_embedding.weight.dtype
        return glob[:, MOTION_LATENT_FRAMES:].to(dtype), local[:, MOTION_LATENT_FRAMES:].to(dtype)
