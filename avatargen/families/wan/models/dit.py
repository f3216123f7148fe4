"""The Wan2.1 video DiT (T2V and I2V), with the InfiniteTalk/MultiTalk audio adapter as an option.

Tensor names are the original checkpoints' (Wan-Video/Wan2.1 ``wan/modules/model.py``, MeiGen-AI/InfiniteTalk
``wan/modules/multitalk_model.py``), so ``diffusion_pytorch_model-*.safetensors`` plus ``infinitetalk.safetensors``
load with ``strict=True``. Differences from the reference that do not change the weights:

- text and CLIP image tokens are separate inputs (the reference concatenates them and splits at 257 / 512);
- no padding of the video sequence to a fixed ``seq_len``: every sample in a batch has the same grid;
- RoPE and timestep tables are computed per call (no buffers), so a meta-device build needs no re-init;
- the speakers' audio comes as one tensor with a speaker axis (the reference batches them), and MultiTalk's
  two-speaker routing (``speakers.py``) runs only with two speakers (the reference computes its attention map in
  every block, also for one);
- the token path is written against a ``TokenSequence`` (``self.sequence``, avatargen/models/sequence.py): whole on
  one process; split over ranks when the runtime applies sequence parallelism (avatargen/runtime/sequence_parallel.py).
  Two-speaker routing reads every token's attention to the first frame averaged over all heads: the span sums it
  over the heads (all-reduced over the heads' ranks) and each rank takes its own tokens' label positions.

With ``fp32_time_head`` (the default) the time embedding, its projection and the output head compute in fp32 with
the weights upcast, as the reference's ``autocast(float32)`` does; the blocks run in the weights' dtype.

Block (``blocks.N``), with ``e`` the six modulation vectors ``modulation + time_projection(t)``::

    x = x + self_attn(norm1(x) * (1 + e1) + e0) * e2
    x = x + cross_attn(norm3(x), text, image)
    x = x + audio_cross_attn(norm_x(x), audio)            # audio adapter only
    x = x + ffn(norm2(x) * (1 + e4) + e3) * e5
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from avatargen.families.wan.models.attention import AudioCrossAttention, CrossAttention, SelfAttention
from avatargen.families.wan.models.audio_proj import AudioProjModel
from avatargen.families.wan.models.layers import FP32LayerNorm, rope_angles, timestep_sinusoid
from avatargen.families.wan.models.params import CLIP_DIM, WanDiTParams
from avatargen.families.wan.models.speakers import SPEAKERS, SpeakerRouting, token_masks
from avatargen.models.sequence import WHOLE, TokenSpan


class WanBlock(nn.Module):
    """One transformer block (``blocks.N``): self-attention, text(+image) cross-attention, [audio], FFN."""

    def __init__(self, params: WanDiTParams) -> None:
        super().__init__()
        dim, eps = params.dim, params.eps
        self.norm1 = FP32LayerNorm(dim, eps, elementwise_affine=False)
        self.self_attn = SelfAttention(dim, params.num_heads, eps)
        self.norm3 = FP32LayerNorm(dim, eps, elementwise_affine=True)
        self.cross_attn = CrossAttention(dim, params.num_heads, eps, with_image=params.image_to_video)
        self.norm2 = FP32LayerNorm(dim, eps, elementwise_affine=False)
        self.ffn = nn.Sequential(
            nn.Linear(dim, params.ffn_dim), nn.GELU(approximate="tanh"), nn.Linear(params.ffn_dim, dim)
        )
        self.modulation = nn.Parameter(torch.randn(1, 6, dim) / dim**0.5)
        self.has_audio = params.audio is not None
        if params.audio is not None:
            self.audio_cross_attn = AudioCrossAttention(dim, params.num_heads, params.audio.output_dim)
            self.norm_x = FP32LayerNorm(dim, eps, elementwise_affine=True)

    def reset_parameters(self) -> None:
        """The block's own tensor (its children reset themselves): the reference's ``randn / sqrt(dim)``."""
        nn.init.normal_(self.modulation, std=self.modulation.shape[-1] ** -0.5)

    def forward(
        self,
        x: Tensor,
        time: Tensor,
        rope: tuple[Tensor, Tensor],
        text: Tensor,
        image: Tensor | None,
        audio: Tensor | None,
        tokens: TokenSpan,
        frame_tokens: int,
        routing: SpeakerRouting | None = None,
    ) -> Tensor:
        """``x`` (B, L, dim) the tokens of span ``tokens`` (``frame_tokens`` a latent frame), ``time`` (B, 6, dim)
        fp32, ``audio`` (B, F, Na, audio_dim) or None -> (B, L, dim); ``routing``: two speakers' regions (their audio
        tokens then come one speaker after the other)."""
        shift1, scale1, gate1, shift2, scale2, gate2 = (self.modulation.float() + time).unbind(1)  # (B, dim) each
        h = self.norm1(x).float() * (1 + scale1[:, None]) + shift1[:, None]  # (B, L, dim) fp32
        routed = routing is not None and self.has_audio and audio is not None
        attended, head_sum = self.self_attn(h.type_as(x), rope, tokens, routing.head_sum if routed else None)
        x = (x.float() + attended.float() * gate1[:, None]).type_as(x)  # (B, L, dim)
        x = x + self.cross_attn(self.norm3(x), text, image)  # (B, L, dim)
        if self.has_audio and audio is not None:
            positions = None
            if routed:  # every token's map (regions, whole L) averaged over heads; this span's tokens' positions
                positions = tokens.take(routing.label_positions(head_sum / self.self_attn.heads), dim=0)  # (L,)
            x = x + self.audio_cross_attn(self.norm_x(x), audio, frame_tokens, tokens.start, positions)  # (B, L, dim)
        h = self.norm2(x).float() * (1 + scale2[:, None]) + shift2[:, None]  # (B, L, dim) fp32
        return (x.float() + self.ffn(h.type_as(x)).float() * gate2[:, None]).type_as(x)  # (B, L, dim)


class Head(nn.Module):
    """Final modulated LayerNorm and linear to patch pixels (``head.head``, ``head.modulation``)."""

    def __init__(self, params: WanDiTParams) -> None:
        super().__init__()
        self.norm = FP32LayerNorm(params.dim, params.eps, elementwise_affine=False)
        self.head = nn.Linear(params.dim, math.prod(params.patch_size) * params.out_dim)
        self.modulation = nn.Parameter(torch.randn(1, 2, params.dim) / params.dim**0.5)

    def reset_parameters(self) -> None:
        """The head's own tensor (its children reset themselves): the reference's ``randn / sqrt(dim)``."""
        nn.init.normal_(self.modulation, std=self.modulation.shape[-1] ** -0.5)

    def forward(self, x: Tensor, time: Tensor, fp32: bool = True) -> Tensor:
        """``x`` (B, L, dim), ``time`` (B, dim) fp32 -> (B, L, prod(patch) * out_dim); ``fp32``: the linear in fp32
        (the weights upcast), else in the weights' dtype."""
        shift, scale = (self.modulation.float() + time[:, None]).unbind(1)  # (B, dim) each
        h = self.norm(x).float() * (1 + scale[:, None]) + shift[:, None]  # (B, L, dim) fp32
        return fp32_forward(self.head, h) if fp32 else self.head(h.type_as(x))


def fp32_forward(module: nn.Module, x: Tensor) -> Tensor:
    """``module`` (a Linear, or a Sequential of Linears and activations) run in fp32 with its weights upcast."""
    if isinstance(module, nn.Sequential):
        for layer in module:
            x = fp32_forward(layer, x)
        return x
    if isinstance(module, nn.Linear):
        bias = None if module.bias is None else module.bias.float()
        return F.linear(x.float(), module.weight.float(), bias)
    return module(x.float())


class ImageEmbedding(nn.Module):
    """CLIP image tokens (B, 257, clip_dim) -> (B, 257, dim) context tokens (``img_emb.proj.{0,1,3,4}``)."""

    def __init__(self, dim: int, clip_dim: int = CLIP_DIM) -> None:
        super().__init__()
        self.proj = nn.Sequential(
            nn.LayerNorm(clip_dim),
            nn.Linear(clip_dim, clip_dim),
            nn.GELU(),
            nn.Linear(clip_dim, dim),
            nn.LayerNorm(dim),
        )

    def forward(self, clip_tokens: Tensor) -> Tensor:
        """(B, Li, clip_dim) -> (B, Li, dim)."""
        return self.proj(clip_tokens)


class WanDiT(nn.Module):
    """Wan2.1 DiT: predicts the flow-matching velocity of a video latent (see the module docstring)."""

    def __init__(self, params: WanDiTParams, fp32_time_head: bool = True) -> None:
        super().__init__()
        params.validate()
        self.params = params
        self.fp32_time_head = fp32_time_head
        dim = params.dim
        self.patch_embedding = nn.Conv3d(params.in_dim, dim, kernel_size=params.patch_size, stride=params.patch_size)
        self.text_embedding = nn.Sequential(
            nn.Linear(params.text_dim, dim), nn.GELU(approximate="tanh"), nn.Linear(dim, dim)
        )
        self.time_embedding = nn.Sequential(nn.Linear(params.freq_dim, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.time_projection = nn.Sequential(nn.SiLU(), nn.Linear(dim, 6 * dim))
        self.blocks = nn.ModuleList([WanBlock(params) for _ in range(params.num_layers)])
        self.head = Head(params)
        if params.image_to_video:
            self.img_emb = ImageEmbedding(dim, params.clip_dim)
        if params.audio is not None:
            self.audio_proj = AudioProjModel(params.audio)
        self.sequence = WHOLE  # every token on this process; sequence parallelism replaces it (models/sequence.py)

    def block_stacks(self) -> list[nn.ModuleList]:
        """This model's repeated block stacks, in forward order (``models/structure.py``)."""
        return [self.blocks]

    def forward(
        self,
        latents: Tensor,
        timesteps: Tensor,
        text: Tensor,
        clip_tokens: Tensor | None = None,
        audio: Tensor | None = None,
        person_masks: Tensor | None = None,
    ) -> Tensor:
        """Velocity for ``latents``.

        Args:
            latents: (B, in_dim, F, H, W): for I2V the noisy latent, the 4-channel mask and the reference latent,
                concatenated on channels (``wan/image2video.py``); F, H, W divisible by ``patch_size``.
            timesteps: (B,) in [0, 1000).
            text: (B, Lt, text_dim) umT5 states, Lt <= text_len; zero-padded here to ``text_len``.
            clip_tokens: (B, 257, 1280) CLIP tokens, required for I2V.
            audio: (B, 1 + 4 * (F - 1), audio_window, layers, channels) wav2vec2 windows per video frame
                (InfiniteTalk's layout), or (B, speakers, ...) for two speakers, or None to run without audio (the
                unconditional branch of audio CFG feeds zeros instead, as the reference does).
            person_masks: (speakers + 1, F_h, F_w) on the latent grid, each speaker's region then the background
                (required with two speakers: MultiTalk's routing).

        Returns:
            (B, out_dim, F, H, W) in fp32.
        """
        p = self.params
        b, _, frames, height, width = latents.shape
        pt, ph, pw = p.patch_size
        if frames % pt or height % ph or width % pw:
            raise ValueError(f"latent grid {(frames, height, width)} is not divisible by patch_size {p.patch_size}")
        if text.shape[1] > p.text_len:
            raise ValueError(f"text has {text.shape[1]} tokens; this model takes at most text_len={p.text_len}")
        grid = (frames // pt, height // ph, width // pw)
        dtype = self.patch_embedding.weight.dtype  # inputs follow the weights (bf16 checkpoints); modulation is fp32

        x = self.patch_embedding(latents.to(dtype)).flatten(2).transpose(1, 2)  # (B, L, dim), L = F'*H'*W'
        tokens = self.sequence.span(x.shape[1])  # the tokens this process computes: all, or a rank's slice
        x = tokens.take(x, dim=1)  # (B, C, dim), C = L or the slice's
        angles = rope_angles(grid, p.head_dim, latents.device)  # (L, head_dim/2) float64
        rope = (tokens.take(angles.cos().float(), dim=0), tokens.take(angles.sin().float(), dim=0))  # (C, hd/2) each

        sinusoid = timestep_sinusoid(timesteps, p.freq_dim)  # (B, freq_dim) fp32
        if self.fp32_time_head:  # the reference's autocast(float32)
            time = fp32_forward(self.time_embedding, sinusoid)  # (B, dim) fp32
            time_mod = fp32_forward(self.time_projection, time).unflatten(1, (6, p.dim))  # (B, 6, dim) fp32
        else:
            time = self.time_embedding(sinusoid.to(dtype))  # (B, dim)
            time_mod = self.time_projection(time).unflatten(1, (6, p.dim)).float()  # (B, 6, dim) fp32
            time = time.float()

        text = torch.cat([text, text.new_zeros(b, p.text_len - text.shape[1], text.shape[2])], dim=1)  # (B, Lt', Dt)
        text = self.text_embedding(text.to(dtype))  # (B, text_len, dim)
        image = None
        if p.image_to_video:
            if clip_tokens is None:
                raise ValueError("this Wan DiT is image-to-video: pass the CLIP image tokens (clip_tokens)")
            image = self.img_emb(clip_tokens.to(dtype))  # (B, 257, dim)
        audio_tokens, routing = None, None
        if audio is not None:
            if p.audio is None:
                raise ValueError("this Wan DiT has no audio adapter; build it with WanDiTParams.audio set")
            speakers = 1 if audio.dim() == 5 else audio.shape[1]
            per_speaker = self.audio_proj(audio.flatten(0, audio.dim() - 5).to(dtype))  # (B*P, 1 + N, n, D)
            # speaker 1's tokens, then speaker 2's, for each latent frame (the reference's order)
            audio_tokens = per_speaker.unflatten(0, (b, speakers)).transpose(1, 2).flatten(2, 3)  # (B, 1+N, P*n, D)
            if audio_tokens.shape[1] != grid[0]:
                raise ValueError(f"audio covers {audio_tokens.shape[1]} latent frames, the latents {grid[0]}")
            if speakers > 1:
                if speakers != SPEAKERS or person_masks is None or person_masks.shape[0] != SPEAKERS + 1:
                    raise ValueError(f"{speakers} speakers need {SPEAKERS} speakers' masks and the background's")
                routing = SpeakerRouting(token_masks(person_masks, grid[1:]))

        for block in self.blocks:
            x = block(x, time_mod, rope, text, image, audio_tokens, tokens, grid[1] * grid[2], routing)  # (B, C, dim)

        x = tokens.gather(self.head(x, time, fp32=self.fp32_time_head), dim=1)  # (B, L, pt*ph*pw*out_dim)
        x = x.reshape(b, *grid, pt, ph, pw, p.out_dim)  # (B, F', H', W', pt, ph, pw, C)
        x = x.permute(0, 7, 1, 4, 2, 5, 3, 6)  # (B, C, F', pt, H', ph, W', pw)
        return x.reshape(b, p.out_dim, frames, height, width).float()  # (B, C, F, H, W)
