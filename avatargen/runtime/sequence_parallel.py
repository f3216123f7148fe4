"""Ulysses sequence parallelism: the ranks of a sequence group each hold a slice of a model's tokens, and exchange
them for a slice of the attention heads around self-attention (DeepSpeed-Ulysses, as xDiT's USP runs Wan's DiT).

A model opts in by writing its token path against a ``TokenSequence`` (avatargen/models/sequence.py);
``apply_sequence_parallel`` replaces it with ``UlyssesSequence``, and nothing else of the model changes. In one
forward over ``L`` tokens on ``P`` ranks:

- each rank computes tokens ``[r * C, (r + 1) * C)``, ``C = ceil(L / P)``: everything per token (projections, norms,
  RoPE, the FFN, cross-attention to text, image and audio tokens, which every rank holds whole) runs on its slice
  only. The last slice is padded when ``P`` does not divide ``L``;
- around self-attention one ``all_to_all_single`` turns (q, k, v) of C tokens x H heads into L tokens x H/P heads,
  the padding is cut off (a padded token is never a key: this is the mask, and the attention over exactly ``L`` keys
  is the single-process one), attention runs, and a second ``all_to_all_single`` returns C tokens x H heads. Heads
  that ``P`` does not divide are padded with zero heads (their output is dropped);
- two-speaker routing (``attend_summing_heads``) reads a sum over every head of the whole sequence's queries and
  keys: each rank computes its heads' share between the two exchanges and one ``all_reduce`` sums the shares;
- after the last block the slices are all-gathered (``all_gather_single``) and the padding dropped.

Per block a rank sends and receives ``4 C H D`` values (q, k, v out, the output back), against ``L / P`` tokens of
compute: the exchange is independent of the model's depth per token and small next to a block's matmuls once a
slice holds a few hundred tokens (docs/distributed.md, "Choosing a layout").

Everything is torch.distributed's own collectives on the sequence group of the render's device mesh; gloo runs them
on a CPU, NCCL on GPUs.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

from avatargen.models.sequence import HeadAttention, HeadSum, TokenSequence, TokenSpan, attention, has_token_sequence


# torch >= 2.13 names it all_gather_single (all_gather_into_tensor, its older name, now warns)
all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


class UlyssesSpan(TokenSpan):
    """One rank's slice of a sequence split over a sequence group (see the module docstring)."""

    def __init__(self, length: int, group: Any, rank: int, size: int):
        local = -(-length // size)  # C = ceil(L / P)
        super().__init__(length, start=rank * local, local=local)
        self.group, self.rank, self.size = group, rank, size

    def take(self, tokens: Tensor, dim: int) -> Tensor:
        dim = dim % tokens.dim()
        start = min(self.start, self.length)
        part = tokens.narrow(dim, start, min(self.start + self.local, self.length) - start)
        missing = self.local - part.shape[dim]
        if missing:  # the last slice runs past the end of the sequence: zeros
            part = F.pad(part, [0, 0] * (tokens.dim() - 1 - dim) + [0, missing])
        return part

    def attend(self, q: Tensor, k: Tensor, v: Tensor, pattern: HeadAttention | None = None) -> Tensor:
        heads = q.shape[2]
        q, k, v = self._heads_of_whole_sequence(q, k, v)  # (B, L, H/P, D) each
        out = attention(q, k, v) if pattern is None else pattern(q, k, v, self.rank * q.shape[2])  # (B, L, H/P*D)
        return self._tokens_of_all_heads(out, heads, q.shape[3])  # (B, C, H*D)

    def attend_summing_heads(self, q: Tensor, k: Tensor, v: Tensor, per_heads: HeadSum) -> tuple[Tensor, Tensor]:
        heads = q.shape[2]
        q, k, v = self._heads_of_whole_sequence(q, k, v)  # (B, L, H/P, D) each
        own = min(q.shape[2], max(0, heads - self.rank * q.shape[2]))  # this rank's real heads (not the zero padding)
        summed = per_heads(q[:, :, :own], k[:, :, :own]).contiguous()  # this rank's heads' share
        dist.all_reduce(summed, op=dist.ReduceOp.SUM, group=self.group)  # every head's, on every rank
        return self._tokens_of_all_heads(attention(q, k, v), heads, q.shape[3]), summed

    def _heads_of_whole_sequence(self, q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(B, C, H, D) each, this rank's tokens of every head -> (B, L, H/P, D) each, every token of its heads."""
        heads, p = q.shape[2], self.size
        group_heads = -(-heads // p)
        qkv = torch.stack([q, k, v])  # (3, B, C, H, D)
        if group_heads * p != heads:
            qkv = F.pad(qkv, (0, 0, 0, group_heads * p - heads))  # (3, B, C, Hp, D): zero heads
        send = qkv.unflatten(3, (p, group_heads)).permute(3, 0, 1, 2, 4, 5).contiguous()  # (P, 3, B, C, H/P, D)
        received = torch.empty_like(send)  # slot i: rank i's C tokens of this rank's heads
        dist.all_to_all_single(received, send, group=self.group)
        q, k, v = received.permute(1, 2, 0, 3, 4, 5).flatten(2, 3)[:, :, : self.length].unbind(0)  # (B, L, H/P, D)
        return q, k, v

    def _tokens_of_all_heads(self, out: Tensor, heads: int, head_dim: int) -> Tensor:
        """Attention output (B, L, H/P*D) of this rank's heads -> (B, C, H*D) of its own tokens."""
        p, c = self.size, self.local
        out = out.unflatten(2, (-1, head_dim))  # (B, L, H/P, D)
        out = F.pad(out, (0, 0, 0, 0, 0, c * p - self.length))  # (B, P*C, H/P, D)
        send = out.unflatten(1, (p, c)).transpose(0, 1).contiguous()  # (P, B, C, H/P, D): slot i to rank i
        received = torch.empty_like(send)  # slot j: rank j's heads of this rank's C tokens
        dist.all_to_all_single(received, send, group=self.group)
        out = received.permute(1, 2, 0, 3, 4).flatten(2, 3)[:, :, :heads]  # (B, C, H, D)
        return out.flatten(2)  # (B, C, H*D)

    def gather(self, tokens: Tensor, dim: int) -> Tensor:
        moved = tokens.movedim(dim, 0).contiguous()  # (C, ...)
        whole = moved.new_empty((self.size * self.local, *moved.shape[1:]))  # (P*C, ...)
        all_gather_single(whole, moved, group=self.group)
        return whole[: self.length].movedim(0, dim)


class UlyssesSequence(TokenSequence):
    """A model's token sequence split over the ranks of ``group`` (a process group of the render's device mesh)."""

    def __init__(self, group: Any):
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)

    def span(self, length: int) -> TokenSpan:
        return UlyssesSpan(length, self.group, self.rank, self.size)


def apply_sequence_parallel(model: nn.Module, group: Any) -> bool:
    """Split ``model``'s token sequence over ``group`` when it declares one (``TokenSequence``); returns whether it
    did. A model without one runs whole on every rank."""
    if not has_token_sequence(model):
        return False
    model.sequence = UlyssesSequence(group)
    return True
