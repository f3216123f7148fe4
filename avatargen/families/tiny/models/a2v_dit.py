"""Audio-to-video flow-matching DiT over low-resolution latents.

Sequence per sample: [reference tokens (one frame); video tokens (T frames x tokens_per_frame)], self-attention
over all of it: frame-axial (``attention="axial"``, half the heads within each frame and the reference, half along
time at each position) or full. Video tokens additionally cross-attend to the audio features of a small window of
frames around their own frame. Timestep + pooled text form the adaLN-Zero conditioning vector.
"""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from avatargen.models.sequence import WHOLE, HeadAttention, TokenSpan, span_of_frames, whole_frames

from avatargen.families.tiny.models.layers import (
    MLP,
    AdaLNZero,
    Attention,
    FinalLayer,
    FrameAxialAttention,
    TimestepEmbedder,
    init_linear_xavier,
    modulate,
    patchify,
    sinusoidal_embedding,
    init_sincos_2d,
    unpatchify,
)
from avatargen.families.tiny.params import ATTENTION_KINDS, A2VDiTParams


class A2VBlock(nn.Module):
    """adaLN-Zero DiT block: self-attention (all tokens), windowed audio cross-attention (video tokens), MLP."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.audio_attn = Attention(dim, heads, context_dim=dim)
        self.norm3 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.mlp = MLP(dim, int(dim * mlp_ratio))
        self.ada = AdaLNZero(dim, dim, 9)  # shift/scale/gate x (self-attn, audio cross-attn, MLP)

    def forward(self, x: Tensor, c: Tensor, audio_windows: Tensor, audio_mask: Tensor, n_ref: int,
                tokens: TokenSpan | None = None, frames_out: tuple[int, int] | None = None,
                pattern: HeadAttention | None = None) -> Tensor:  # fmt: skip
        """``x``: (B, n_ref + T*N, D); ``c``: (B, D); ``audio_windows``: (B*T, 2w+1, D) with ``audio_mask``
        (B*T, 1, 1, 2w+1) -> (B, n_ref + T*N, D). With ``tokens`` (sequence parallelism), ``x`` is that span of the
        sequence (B, C, D) and so is the output. ``frames_out`` (f0, f1): only the tokens of video frames f0..f1-1
        are computed (every token is still a key and a value): the output is theirs, (B, (f1 - f0) * N, D).
        ``pattern``: which keys self-attention's queries see (None: all)."""
        if frames_out is not None:
            return self._frames_only(x, c, audio_windows, audio_mask, n_ref, frames_out, pattern)
        s1, sc1, g1, s2, sc2, g2, s3, sc3, g3 = self.ada(c)  # 9 x (B, D)
        split = tokens is not None and tokens.local != tokens.length
        attended = self.attn(modulate(self.norm1(x), s1, sc1), tokens=tokens if split else None, pattern=pattern)
        x = x + g1[:, None] * attended  # (B, L, D)

        if split:
            heard, n_ref = self._heard_span(x, s2, sc2, audio_windows, audio_mask, n_ref, tokens)  # (B, C - k, D)
            video = x[:, n_ref:]
        else:
            frames = audio_windows.shape[0] // x.shape[0]
            video = x[:, n_ref:]  # (B, T*N, D)
            q = rearrange(modulate(self.norm2(video), s2, sc2), "b (t n) d -> (b t) n d", t=frames)  # (B*T, N, D)
            heard = self.audio_attn(q, context=audio_windows, mask=audio_mask)  # (B*T, N, D)
            heard = rearrange(heard, "(b t) n d -> b (t n) d", t=frames)  # (B, T*N, D)
        x = torch.cat([x[:, :n_ref], video + g2[:, None] * heard], dim=1)  # (B, L, D)

        return x + g3[:, None] * self.mlp(modulate(self.norm3(x), s3, sc3))  # (B, L, D)

    def _frames_only(self, x: Tensor, c: Tensor, audio_windows: Tensor, audio_mask: Tensor, n_ref: int,
                     frames_out: tuple[int, int], pattern: HeadAttention | None) -> Tensor:  # fmt: skip
        """The block's output for the tokens of video frames ``frames_out`` = (f0, f1) alone: (B, (f1 - f0) N, D)."""
        s1, sc1, g1, s2, sc2, g2, s3, sc3, g3 = self.ada(c)  # 9 x (B, D)
        b, frames = x.shape[0], audio_windows.shape[0] // x.shape[0]
        f0, f1 = frames_out
        per_frame = (x.shape[1] - n_ref) // frames
        q0, q1 = n_ref + f0 * per_frame, n_ref + f1 * per_frame
        attended = self.attn(modulate(self.norm1(x), s1, sc1), queries_from=q0, queries_to=q1, pattern=pattern)
        video = x[:, q0:q1] + g1[:, None] * attended  # (B, (f1 - f0) N, D)
        q = rearrange(modulate(self.norm2(video), s2, sc2), "b (t n) d -> (b t) n d", t=f1 - f0)  # (B T', N, D)
        windows = audio_windows.unflatten(0, (b, frames))[:, f0:f1].flatten(0, 1)  # (B T', 2w+1, D)
        mask = audio_mask.unflatten(0, (b, frames))[:, f0:f1].flatten(0, 1)  # (B T', 1, 1, 2w+1)
        heard = rearrange(self.audio_attn(q, context=windows, mask=mask), "(b t) n d -> b (t n) d", b=b)
        video = video + g2[:, None] * heard  # (B, (f1 - f0) N, D)
        return video + g3[:, None] * self.mlp(modulate(self.norm3(video), s3, sc3))  # (B, (f1 - f0) N, D)

    def _heard_span(self, x: Tensor, shift: Tensor, scale: Tensor, audio_windows: Tensor, audio_mask: Tensor,
                    n_ref: int, tokens: TokenSpan) -> tuple[Tensor, int]:  # fmt: skip
        """The audio attention of the video tokens in span ``tokens`` (each hears its own frame's window): (B, V, D)
        for its V video tokens, and k, its reference tokens before them."""
        b, frames = x.shape[0], audio_windows.shape[0] // x.shape[0]
        frame_tokens = (tokens.length - n_ref) // frames
        k = min(max(n_ref - tokens.start, 0), x.shape[1])  # the span's reference tokens come first
        video = modulate(self.norm2(x[:, k:]), shift, scale)  # (B, V, D)
        start = tokens.start + k - n_ref  # the first one's index among the video tokens
        grouped, first = whole_frames(video, start, frame_tokens)  # (B, n, N, D)
        n = grouped.shape[1]
        chosen = torch.arange(first, first + n, device=x.device).clamp(max=frames - 1)  # padding repeats the last
        windows = audio_windows.unflatten(0, (b, frames))[:, chosen].flatten(0, 1)  # (B*n, 2w+1, D)
        mask = audio_mask.unflatten(0, (b, frames))[:, chosen].flatten(0, 1)  # (B*n, 1, 1, 2w+1)
        heard = self.audio_attn(grouped.flatten(0, 1), context=windows, mask=mask).unflatten(0, (b, n))  # (B, n, N, D)
        return span_of_frames(heard, start, video.shape[1]), k


class A2VDiT(nn.Module):
    """Flow-matching velocity model ``v(x_t, t | cond frames, reference, audio, text)`` over (B, C, T, h, w) latents.

    Conditioning frames (``cond_mask`` True) take the clean ``cond_latents`` plus a learned "given frame" embedding
    instead of ``x_t``, so their noisy input never reaches the output.
    """

    def __init__(self, params: A2VDiTParams) -> None:
        super().__init__()
        p = params
        if p.latent_size % p.patch_size:
            raise ValueError(f"latent_size ({p.latent_size}) must be a multiple of patch_size ({p.patch_size})")
        if p.audio_window < 0:
            raise ValueError(f"audio_window must be >= 0, got {p.audio_window}")
        self.params = p
        grid = p.latent_size // p.patch_size
        self.tokens_per_frame = grid * grid
        self.attention_pattern: HeadAttention | None = None
        self.use_attention(p.attention)
        patch_dim = p.latent_channels * p.patch_size**2

        self.patch_embed = nn.Linear(patch_dim, p.dim)
        self.spatial_pos = nn.Parameter(torch.empty(1, grid * grid, p.dim))  # (1, N, D), learned; sincos init below
        self.given_embed = nn.Parameter(torch.zeros(p.dim))  # added to tokens of conditioning frames
        self.ref_type_embed = nn.Parameter(torch.zeros(p.dim))  # marks the in-context reference tokens
        self.t_embed = TimestepEmbedder(p.dim)
        self.text_proj = nn.Linear(p.text_dim, p.dim)
        self.audio_proj = nn.Sequential(
            nn.Linear(p.audio_dim, p.dim), nn.GELU(approximate="tanh"), nn.Linear(p.dim, p.dim)
        )
        self.audio_offset_embed = nn.Parameter(torch.zeros(2 * p.audio_window + 1, p.dim))  # offset f'-f in window
        self.blocks = nn.ModuleList(A2VBlock(p.dim, p.heads, p.mlp_ratio) for _ in range(p.depth))
        self.final = FinalLayer(p.dim, p.dim, patch_dim)
        self.sequence = WHOLE  # every token on this process; sequence parallelism replaces it (models/sequence.py)
        self.init_weights()

    def use_attention(self, kind: str) -> None:
        """Self-attention from now on: ``"axial"`` or ``"full"`` (the same weights; training distils one into the
        other)."""
        if kind not in ATTENTION_KINDS:
            raise ValueError(f"attention must be one of {', '.join(ATTENTION_KINDS)}, got {kind!r}")
        if kind == "axial" and self.params.heads < 2:
            raise ValueError(f"axial attention needs heads >= 2 (within frames, along time), got {self.params.heads}")
        self.params = replace(self.params, attention=kind)
        axial = kind == "axial"
        self.attention_pattern = FrameAxialAttention(self.tokens_per_frame, self.params.heads // 2) if axial else None

    def block_stacks(self) -> list[nn.ModuleList]:
        """The transformer blocks, in forward order (see avatargen/models/structure.py)."""
        return [self.blocks]

    def init_weights(self) -> None:
        """The model's own init on top of each layer's default (also run after a meta-device build)."""
        # DiT init: xavier linears, small normal embeddings; then adaLN-Zero (every AdaLNZero.proj and the final
        # head back to zero) so each block starts as the identity and the model predicts v = 0.
        grid = self.params.latent_size // self.params.patch_size
        init_sincos_2d(self.spatial_pos, grid, grid)
        init_linear_xavier(self)
        nn.init.normal_(self.t_embed.mlp[0].weight, std=0.02)
        nn.init.normal_(self.t_embed.mlp[2].weight, std=0.02)
        for emb in (self.given_embed, self.ref_type_embed, self.audio_offset_embed):
            nn.init.normal_(emb, std=0.02)
        for module in self.modules():
            if isinstance(module, AdaLNZero):
                nn.init.zeros_(module.proj.weight)
                nn.init.zeros_(module.proj.bias)
        nn.init.zeros_(self.final.linear.weight)
        nn.init.zeros_(self.final.linear.bias)

    def audio_windows(self, audio: Tensor) -> tuple[Tensor, Tensor]:
        """Per-frame audio context: (B, T, audio_dim) -> windows (B*T, 2w+1, D) and a validity mask
        (B*T, 1, 1, 2w+1) that hides the zero padding beyond the chunk's edges."""
        w = self.params.audio_window
        b, t, _ = audio.shape
        feats = F.pad(self.audio_proj(audio), (0, 0, w, w))  # (B, T+2w, D)
        windows = feats.unfold(1, 2 * w + 1, 1)  # (B, T, D, 2w+1)
        windows = rearrange(windows, "b t d k -> (b t) k d") + self.audio_offset_embed  # (B*T, 2w+1, D)
        idx = torch.arange(t, device=audio.device)[:, None] + torch.arange(-w, w + 1, device=audio.device)  # (T, 2w+1)
        valid = ((idx >= 0) & (idx < t)).repeat(b, 1)  # (B*T, 2w+1)
        return windows, valid[:, None, None, :]

    def forward(
        self,
        x_t: Tensor,
        t: Tensor,
        cond_latents: Tensor,
        cond_mask: Tensor,
        ref_latents: Tensor,
        audio: Tensor,
        text: Tensor,
        frames_out: tuple[int, int] | None = None,
    ) -> Tensor:
        """Predict the flow velocity.

        Args:
            x_t: (B, C, T, h, w) noisy latents at time ``t``.
            t: (B,) flow time in [0, 1], 1 = pure noise.
            cond_latents: (B, C, T, h, w) clean latents, read only where ``cond_mask`` is True.
            cond_mask: (B, T) bool, True at conditioning (given) frames.
            ref_latents: (B, C, h, w) reference-image latents.
            audio: (B, T, audio_dim) per-frame audio features.
            text: (B, text_dim) pooled text / scene embedding.
            frames_out: (f0, f1): only frames f0..f1-1's velocity is wanted (e.g. the frames not given); the last
                block and the head then compute their tokens alone, and the other frames' velocity is 0. Ignored
                under sequence parallelism.

        Returns:
            (B, C, T, h, w) velocity.
        """
        b, c, frames, h, w = x_t.shape
        p = self.params
        if (h, w) != (p.latent_size, p.latent_size):
            raise ValueError(f"latent grid {(h, w)} != latent_size {p.latent_size}")
        given = cond_mask[:, None, :, None, None]  # (B, 1, T, 1, 1)
        x_in = torch.where(given, cond_latents, x_t)  # (B, C, T, h, w)

        video = patchify(rearrange(x_in, "b c t h w -> (b t) c h w"), p.patch_size)  # (B*T, N, C p p)
        video = self.patch_embed(video) + self.spatial_pos  # (B*T, N, D)
        frame_pos = sinusoidal_embedding(torch.arange(frames, device=x_t.device), p.dim)  # (T, D)
        video = rearrange(video, "(b t) n d -> b t n d", b=b) + frame_pos[None, :, None]  # (B, T, N, D)
        video = video + cond_mask[..., None, None].to(video.dtype) * self.given_embed  # (B, T, N, D)
        video = rearrange(video, "b t n d -> b (t n) d")  # (B, T*N, D)

        ref = self.patch_embed(patchify(ref_latents, p.patch_size))  # (B, N, D)
        ref = ref + self.spatial_pos + self.ref_type_embed  # (B, N, D)
        n_ref = ref.shape[1]
        x = torch.cat([ref, video], dim=1)  # (B, N + T*N, D)
        tokens = self.sequence.span(x.shape[1])  # the tokens this process computes: all, or a rank's slice
        x = tokens.take(x, dim=1)  # (B, C, D)

        cond = self.t_embed(t) + self.text_proj(text)  # (B, D)
        windows, window_mask = self.audio_windows(audio)  # (B*T, 2w+1, D), (B*T, 1, 1, 2w+1)
        if frames_out is not None and (tokens.local != tokens.length or not self.blocks or frames_out == (0, frames)):
            frames_out = None  # all of them: nothing to leave out (or a rank's span of the tokens)
        for index, block in enumerate(self.blocks):
            last = frames_out if index == len(self.blocks) - 1 else None
            x = block(x, cond, windows, window_mask, n_ref, tokens, frames_out=last, pattern=self.attention_pattern)

        if frames_out is None:
            video = tokens.gather(x, dim=1)[:, n_ref:]  # (B, T*N, D)
            f0, f1 = 0, frames
        else:
            video, (f0, f1) = x, frames_out  # (B, (f1 - f0) N, D)
        out = self.final(video, cond)  # (B, T'*N, C p p)
        out = rearrange(out, "b (t n) e -> (b t) n e", t=f1 - f0)  # (B*T', N, C p p)
        out = unpatchify(out, p.patch_size, h, w)  # (B*T', C, h, w)
        out = rearrange(out, "(b t) c h w -> b c t h w", b=b)  # (B, C, T', h, w)
        return F.pad(out, (0, 0, 0, 0, f0, frames - f1)) if (f0, f1) != (0, frames) else out  # (B, C, T, h, w)
