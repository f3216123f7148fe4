"""The umT5 text encoder Wan2.1 conditions on (``models_t5_umt5-xxl-enc-bf16.pth``), with the reference's tensor names.

Wan-Video/Wan2.1 ``wan/modules/t5.py`` (``T5Encoder`` built by ``umt5_xxl(encoder_only=True)``): pre-norm T5 blocks
with RMS norms, attention without the 1/sqrt(d) scale, a relative-position bias learned per block (umT5: not shared),
and a gated-GELU (tanh) feed-forward. Padded key positions are masked; the DiT takes the states of the real tokens.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from avatargen.families.wan.models.layers import RMSNorm
from avatargen.families.wan.models.params import UMT5Params


def relative_position_buckets(length: int, num_buckets: int, max_distance: int, device: torch.device) -> Tensor:
    """Bidirectional T5 buckets of key - query offsets: ``(length, length)`` long.

    Half the buckets per direction; within one, offsets below a quarter of the buckets each get their own, larger
    ones share log-spaced buckets up to ``max_distance``.
    """
    offset = torch.arange(length, device=device)[None, :] - torch.arange(length, device=device)[:, None]  # (Lq, Lk)
    half = num_buckets // 2
    buckets = (offset > 0).long() * half
    distance = offset.abs()
    exact = half // 2
    log_ratio = torch.log(distance.clamp(min=1).float() / exact) / math.log(max_distance / exact)
    far = (exact + (log_ratio * (half - exact)).long()).clamp(max=half - 1)
    return buckets + torch.where(distance < exact, distance, far)


class RelativePositionBias(nn.Module):
    """Learned per-head bias for each relative-position bucket (``pos_embedding.embedding``)."""

    def __init__(self, params: UMT5Params) -> None:
        super().__init__()
        self.num_buckets, self.max_distance = params.num_buckets, params.max_distance
        self.embedding = nn.Embedding(params.num_buckets, params.num_heads)

    def forward(self, length: int) -> Tensor:
        """-> (1, heads, length, length)."""
        buckets = relative_position_buckets(length, self.num_buckets, self.max_distance, self.embedding.weight.device)
        return self.embedding(buckets).permute(2, 0, 1)[None]  # (1, H, L, L)


class T5Attention(nn.Module):
    """Multi-head attention without the 1/sqrt(d) scale (T5 folds it into the weights), no biases."""

    def __init__(self, params: UMT5Params) -> None:
        super().__init__()
        self.heads = params.num_heads
        self.q = nn.Linear(params.dim, params.dim_attn, bias=False)
        self.k = nn.Linear(params.dim, params.dim_attn, bias=False)
        self.v = nn.Linear(params.dim, params.dim_attn, bias=False)
        self.o = nn.Linear(params.dim_attn, params.dim, bias=False)

    def forward(self, x: Tensor, bias: Tensor) -> Tensor:
        """``x`` (B, L, dim), ``bias`` (B or 1, H, L, L) additive (position + mask) -> (B, L, dim)."""
        q, k, v = (proj(x).unflatten(-1, (self.heads, -1)).transpose(1, 2) for proj in (self.q, self.k, self.v))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(q.dtype), scale=1.0)  # (B, H, L, D)
        return self.o(out.transpose(1, 2).flatten(2))


class T5FeedForward(nn.Module):
    """``fc2(fc1(x) * gelu_tanh(gate(x)))`` (``gate.0``, ``fc1``, ``fc2``)."""

    def __init__(self, params: UMT5Params) -> None:
        super().__init__()
        self.gate = nn.Sequential(nn.Linear(params.dim, params.dim_ffn, bias=False), nn.GELU(approximate="tanh"))
        self.fc1 = nn.Linear(params.dim, params.dim_ffn, bias=False)
        self.fc2 = nn.Linear(params.dim_ffn, params.dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        """(B, L, dim) -> (B, L, dim)."""
        return self.fc2(self.gate(x) * self.fc1(x))


class T5Block(nn.Module):
    """Pre-norm self-attention with this block's own relative-position bias, then the feed-forward."""

    def __init__(self, params: UMT5Params) -> None:
        super().__init__()
        self.norm1 = RMSNorm(params.dim, params.eps, in_weight_dtype=True)
        self.attn = T5Attention(params)
        self.norm2 = RMSNorm(params.dim, params.eps, in_weight_dtype=True)
        self.ffn = T5FeedForward(params)
        self.pos_embedding = RelativePositionBias(params)

    def forward(self, x: Tensor, mask_bias: Tensor) -> Tensor:
        """``x`` (B, L, dim), ``mask_bias`` (B, 1, 1, L) -> (B, L, dim)."""
        x = x + self.attn(self.norm1(x), self.pos_embedding(x.shape[1]) + mask_bias)
        return x + self.ffn(self.norm2(x))


class UMT5Encoder(nn.Module):
    """Token ids -> umT5 encoder states (``token_embedding``, ``blocks.N``, ``norm``)."""

    def __init__(self, params: UMT5Params) -> None:
        super().__init__()
        params.validate()
        self.params = params
        self.token_embedding = nn.Embedding(params.vocab_size, params.dim)
        self.blocks = nn.ModuleList([T5Block(params) for _ in range(params.num_layers)])
        self.norm = RMSNorm(params.dim, params.eps, in_weight_dtype=True)

    def block_stacks(self) -> list[nn.ModuleList]:
        """This model's repeated block stacks, in forward order (``models/structure.py``)."""
        return [self.blocks]

    def forward(self, ids: Tensor, mask: Tensor | None = None) -> Tensor:
        """``ids`` (B, L) long, ``mask`` (B, L) with 1 for real tokens (None: all real) -> (B, L, dim)."""
        x = self.token_embedding(ids)  # (B, L, dim)
        if mask is None:
            mask = torch.ones_like(ids)
        mask_bias = torch.zeros(mask.shape, dtype=torch.float32, device=ids.device)
        mask_bias = mask_bias.masked_fill(mask == 0, torch.finfo(torch.float32).min)[:, None, None, :]  # (B,1,1,L)
        for block in self.blocks:
            x = block(x, mask_bias)
        return self.norm(x)
