"""Building blocks shared by avatargen's transformers: attention, MLP, adaLN-Zero, embeddings, patching.

Everything here is architecture only and device-agnostic; every tensor op keeps fp32 inputs in fp32.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from avatargen.models.sequence import HeadAttention, TokenSpan

# --------------------------------------------------------------------------------------------------------------
# Positional / timestep embeddings
# --------------------------------------------------------------------------------------------------------------


def sinusoidal_embedding(positions: Tensor, dim: int, max_period: float = 10000.0) -> Tensor:
    """Sinusoidal features of (possibly fractional) positions: ``(...,) -> (..., dim)``, [cos | sin] halves."""
    half = dim // 2
    freqs = torch.exp(
        -math.log(max_period) * torch.arange(half, dtype=torch.float32, device=positions.device) / half
    )  # (half,)
    args = positions.float()[..., None] * freqs  # (..., half)
    emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)  # (..., 2 * half)
    if dim % 2:
        emb = F.pad(emb, (0, 1))  # (..., dim)
    return emb


def sincos_2d(height: int, width: int, dim: int) -> Tensor:
    """Fixed 2D sin-cos position table (MAE/DiT style), row-major over the grid: ``(height * width, dim)``.

    Always computed on the CPU, whatever the default device (a meta build included, see models/meta.py): callers
    ``copy_`` it into the parameter it initialises, wherever that lives."""
    if dim % 4:
        raise ValueError(f"sincos_2d needs dim divisible by 4, got dim={dim}")
    cpu = torch.device("cpu")
    ys, xs = torch.meshgrid(torch.arange(height, device=cpu), torch.arange(width, device=cpu), indexing="ij")  # (H, W)
    emb_y = sinusoidal_embedding(ys.reshape(-1), dim // 2)  # (H*W, dim/2)
    emb_x = sinusoidal_embedding(xs.reshape(-1), dim // 2)  # (H*W, dim/2)
    return torch.cat([emb_y, emb_x], dim=-1)  # (H*W, dim)


def init_sincos_2d(param: Tensor, height: int, width: int) -> None:
    """Fill ``param`` (1, height * width, dim) with ``sincos_2d``; on a meta tensor only the shape is checked (the
    table would be computed on the CPU for nothing: a meta build must cost no memory whatever the grid)."""
    dim = param.shape[-1]
    if dim % 4:
        raise ValueError(f"sincos_2d needs dim divisible by 4, got dim={dim}")
    if not param.is_meta:
        with torch.no_grad():
            param.copy_(sincos_2d(height, width, dim)[None])


class TimestepEmbedder(nn.Module):
    """Scalar flow time ``t`` in [0, 1] -> conditioning vector (sinusoid of ``1000 t`` followed by an MLP)."""

    def __init__(self, dim: int, freq_dim: int = 256) -> None:
        super().__init__()
        self.freq_dim = freq_dim
        self.mlp = nn.Sequential(nn.Linear(freq_dim, dim), nn.SiLU(), nn.Linear(dim, dim))

    def forward(self, t: Tensor) -> Tensor:
        """``t``: (B,) -> (B, dim)."""
        # Scale by 1000 so that the fine frequencies resolve the [0, 1] range (DiT used integer steps 0..999).
        freq = sinusoidal_embedding(t * 1000.0, self.freq_dim)  # (B, freq_dim)
        return self.mlp(freq)  # (B, dim)


# --------------------------------------------------------------------------------------------------------------
# Attention and MLP
# --------------------------------------------------------------------------------------------------------------


class Attention(nn.Module):
    """Multi-head attention over ``F.scaled_dot_product_attention``; self-attention, or cross-attention when a
    ``context`` is given. ``mask`` is a bool tensor broadcastable to (B, heads, Lq, Lk), True = may attend."""

    def __init__(self, dim: int, heads: int, context_dim: int | None = None) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim ({dim}) must be divisible by heads ({heads})")
        self.heads = heads
        self.is_cross = context_dim is not None
        if self.is_cross:
            self.q = nn.Linear(dim, dim)
            self.kv = nn.Linear(context_dim, 2 * dim)
        else:
            self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(
        self, x: Tensor, context: Tensor | None = None, mask: Tensor | None = None, queries_from: int = 0,
        tokens: TokenSpan | None = None, queries_to: int | None = None, pattern: HeadAttention | None = None,
    ) -> Tensor:
        """``x``: (B, L, D); ``context``: (B, Lk, Dc) for cross-attention -> (B, Lq, D): the outputs of the tokens
        ``queries_from:queries_to`` (default: from ``queries_from`` on; self-attention: every token is still a key
        and a value). ``tokens``: ``x`` is that span of a longer sequence, whose whole is attended to
        (models/sequence.py). ``pattern``: self-attention computed by it instead of every query over every key
        (e.g. :class:`FrameAxialAttention`)."""
        if not self.is_cross and (tokens is not None or pattern is not None):
            q, k, v = rearrange(self.qkv(x), "b l (three h d) -> three b l h d", three=3, h=self.heads)  # (B, L, H, d)
            if tokens is not None:
                return self.proj(tokens.attend(q, k, v, pattern))  # (B, L, D)
            return self.proj(pattern(q[:, queries_from:queries_to], k, v, 0, queries_from))  # (B, Lq, D)
        if self.is_cross:
            if context is None:
                raise ValueError("cross-attention needs a context")
            q = rearrange(self.q(x), "b l (h d) -> b h l d", h=self.heads)  # (B, H, Lq, d)
            k, v = rearrange(self.kv(context), "b l (two h d) -> two b h l d", two=2, h=self.heads)  # (B, H, Lk, d)
        else:
            q, k, v = rearrange(self.qkv(x), "b l (three h d) -> three b h l d", three=3, h=self.heads)
        q = q[:, :, queries_from:queries_to]  # (B, H, Lq, d)
        if mask is not None and mask.shape[-2] > 1:
            mask = mask[..., queries_from:queries_to, :]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, H, Lq, d)
        return self.proj(rearrange(out, "b h l d -> b l (h d)"))  # (B, Lq, D)


class FrameAxialAttention:
    """Self-attention over a frame-major sequence (frames of ``frame_tokens`` tokens, the reference frame first),
    split by heads: heads ``0 .. spatial_heads - 1`` attend within a frame (its own tokens and the reference
    frame's), the others along time (the tokens at the same position in every frame, the reference's included).

    The same scores as full attention with a mask that allows only those keys, at a fraction of the cost: for F frames
    of N tokens, F N (2N + F) scores for a spatial and a temporal head against 2 (F N)^2 (the bundled A2V's N window,
    19 frames of 64 tokens: 16x fewer).
    A :data:`~avatargen.models.sequence.HeadAttention`: ``q`` (B, Lq, h, d) are the queries of whole frames from token
    ``queries_from`` on, ``k``/``v`` (B, L, h, d) the whole sequence, ``first_head`` the index of their first head
    (a rank of a sequence-parallel group holds some of the heads) -> (B, Lq, h d)."""

    def __init__(self, frame_tokens: int, spatial_heads: int) -> None:
        self.frame_tokens = frame_tokens
        self.spatial_heads = spatial_heads

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, first_head: int = 0, queries_from: int = 0) -> Tensor:
        n = self.frame_tokens
        if q.shape[1] % n or k.shape[1] % n or queries_from % n:
            raise ValueError(f"frame-axial attention needs whole frames of {n} tokens")
        first_frame = queries_from // n
        q, k, v = (t.unflatten(1, (-1, n)) for t in (q, k, v))  # (B, F', N, h, d), (B, F, N, h, d) x 2
        spatial = min(max(self.spatial_heads - first_head, 0), q.shape[3])
        within = [t[..., :spatial, :] for t in (q, k, v)]  # q, k, v of the heads within frames
        along = [t[..., spatial:, :] for t in (q, k, v)]  # of the heads along time
        parts = []
        if spatial:
            parts.append(self._within_frames(*within, first_frame))
        if spatial < q.shape[3]:
            parts.append(self._along_time(*along))
        return torch.cat(parts, dim=3).flatten(1, 2).flatten(2)  # (B, F' N, h d)

    # Both run SDPA on 4-D (batch, heads, length, d) tensors: with more dimensions a CPU falls back from its flash
    # kernel to the plain one (2x slower for the within-frame half).

    @staticmethod
    def _within_frames(q: Tensor, k: Tensor, v: Tensor, first_frame: int) -> Tensor:
        """Each frame's queries over its own keys and the reference frame's: (B, F', N, h, d) -> the same shape. The
        reference frame's keys twice for itself change nothing (every key doubled: the same softmax)."""
        b, frames = q.shape[:2]

        def keys(t: Tensor) -> Tensor:  # (B, F, N, h, d) -> (B F', h, 2N, d)
            own = t[:, first_frame : first_frame + frames]  # (B, F', N, h, d)
            return torch.cat([t[:, :1].expand_as(own), own], dim=2).transpose(2, 3).flatten(0, 1)

        out = F.scaled_dot_product_attention(q.transpose(2, 3).flatten(0, 1), keys(k), keys(v))  # (B F', h, N, d)
        return out.unflatten(0, (b, frames)).transpose(2, 3)  # (B, F', N, h, d)

    @staticmethod
    def _along_time(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """Each token's query over the keys at its position in every frame: (B, F', N, h, d) -> the same shape."""
        b, n = q.shape[0], q.shape[2]
        columns = (t.permute(0, 2, 3, 1, 4).flatten(0, 1) for t in (q, k, v))  # (B N, h, F', d) each
        out = F.scaled_dot_product_attention(*columns)  # (B N, h, F', d)
        return out.unflatten(0, (b, n)).permute(0, 3, 1, 2, 4)  # (B, F', N, h, d)


class MLP(nn.Module):
    """Two-layer feed-forward with GELU.

    The exact (erf) GELU, not DiT's tanh approximation: on a CPU PyTorch's tanh-GELU kernel is 5-8x slower (15 % of
    an A2V forward). The shipped checkpoint was trained with the tanh form; the two differ by at most 5e-4 per
    activation, and its frames by 0.0035 grey levels mean (docs/performance.md, "A2V and SR")."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: Tensor) -> Tensor:
        """(..., D) -> (..., D)."""
        return self.fc2(F.gelu(self.fc1(x)))


class TransformerBlock(nn.Module):
    """Unconditioned pre-norm block: ``x + attn(LN(x))``, then ``x + mlp(LN(x))``."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float = 4.0) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = MLP(dim, int(dim * mlp_ratio))

    def forward(self, x: Tensor, mask: Tensor | None = None, keep_from: int = 0) -> Tensor:
        """(B, L, D) -> (B, L - keep_from, D); ``mask`` as in :class:`Attention`. ``keep_from`` > 0 computes only
        the tokens from there on (all tokens are still attended to): a last block whose first tokens nobody reads."""
        x = x[:, keep_from:] + self.attn(self.norm1(x), mask=mask, queries_from=keep_from)  # (B, L - keep_from, D)
        return x + self.mlp(self.norm2(x))  # (B, L - keep_from, D)


# --------------------------------------------------------------------------------------------------------------
# adaLN-Zero
# --------------------------------------------------------------------------------------------------------------


def modulate(x: Tensor, shift: Tensor, scale: Tensor) -> Tensor:
    """adaLN modulation of token features ``x`` (B, L, D) by per-sample ``shift``/``scale`` (B, D)."""
    return x * (1 + scale[:, None]) + shift[:, None]


class AdaLNZero(nn.Module):
    """Conditioning vector -> ``chunks`` modulation vectors (shifts, scales, gates).

    adaLN-Zero: the projection is zero-initialised, so at init every shift/scale/gate is 0, each residual branch
    is gated off and each block starts as the identity (DiT, Peebles & Xie 2023, section 3.2).
    """

    def __init__(self, dim: int, cond_dim: int, chunks: int) -> None:
        super().__init__()
        self.chunks = chunks
        self.proj = nn.Linear(cond_dim, chunks * dim)
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)

    def forward(self, c: Tensor) -> tuple[Tensor, ...]:
        """``c``: (B, cond_dim) -> ``chunks`` tensors of shape (B, D)."""
        return self.proj(F.silu(c)).chunk(self.chunks, dim=-1)


class FinalLayer(nn.Module):
    """adaLN-modulated LayerNorm + linear head; head and modulation are zero-initialised (output 0 at init)."""

    def __init__(self, dim: int, cond_dim: int, out_dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.ada = AdaLNZero(dim, cond_dim, 2)
        self.linear = nn.Linear(dim, out_dim)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, x: Tensor, c: Tensor) -> Tensor:
        """``x``: (B, L, D), ``c``: (B, cond_dim) -> (B, L, out_dim)."""
        shift, scale = self.ada(c)  # (B, D) each
        return self.linear(modulate(self.norm(x), shift, scale))  # (B, L, out_dim)


def init_linear_xavier(module: nn.Module) -> None:
    """DiT's base init: xavier-uniform weights and zero biases for every ``nn.Linear`` under ``module``.

    Call it BEFORE the zero-inits (adaLN-Zero, heads) so those stay zero.
    """
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)


# --------------------------------------------------------------------------------------------------------------
# Patching
# --------------------------------------------------------------------------------------------------------------


def patchify(x: Tensor, patch: int) -> Tensor:
    """Images to non-overlapping patch tokens, row-major: (N, C, H, W) -> (N, (H/p)(W/p), C p p)."""
    return rearrange(x, "n c (h p) (w q) -> n (h w) (c p q)", p=patch, q=patch)


def unpatchify(tokens: Tensor, patch: int, height: int, width: int) -> Tensor:
    """Inverse of :func:`patchify`: (N, (H/p)(W/p), C p p) -> (N, C, H, W) for an H x W image."""
    return rearrange(
        tokens, "n (h w) (c p q) -> n c (h p) (w q)", h=height // patch, w=width // patch, p=patch, q=patch
    )
