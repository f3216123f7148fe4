"""How a model's token sequence is laid out over the processes that run one forward: what a model writes its token
path against, so that sequence parallelism can be applied from outside (avatargen/runtime/sequence_parallel.py).

A model with a long token sequence (a video DiT) holds a ``TokenSequence`` in its ``sequence`` attribute and, in each
forward, asks it for the span of the ``L`` tokens this process computes. It then touches the token dimension in four
places only:

- ``span.take(t, dim)``: this process's tokens of a per-token tensor (the patch embeddings, RoPE tables);
- ``span.attend(q, k, v[, pattern])``: self-attention of its queries over the keys and values of the whole sequence
  (every key, or those a ``HeadAttention`` pattern picks)
  (``span.attend_summing_heads`` also sums a function of the whole sequence's queries and keys over all heads, as
  two-speaker routing needs: under sequence parallelism each rank holds some heads, and the sum is all-reduced);
- ``span.start``: the global index of its first token (for anything that depends on a token's position, e.g. which
  latent frame it belongs to);
- ``span.gather(t, dim)``: the whole sequence back, after the last block.

Here the sequence is whole: one process holds every token, ``take`` and ``gather`` return their input and
``attend`` is plain attention, so a model runs exactly as it did without this module. The runtime replaces a
model's ``sequence`` with one that splits the tokens over ranks (Ulysses) when a render asks for it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch.nn.functional as F
from torch import Tensor, nn

# queries and keys of the whole sequence for some of the heads, (B, length, h, D) each -> their sum over those h heads
# (a tensor whose shape does not depend on h)
HeadSum = Callable[[Tensor, Tensor], Tensor]

# self-attention of some heads over the whole sequence: q, k, v (B, L, h, D) and the index of their first head (a rank
# of a sequence-parallel group holds heads first .. first + h - 1) -> (B, L, h*D); a pattern of which keys each query
# sees, e.g. avatargen/families/tiny/models/layers.py's FrameAxialAttention
HeadAttention = Callable[[Tensor, Tensor, Tensor, int], Tensor]


def attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """q (B, Lq, H, D), k/v (B, Lk, H, D) -> (B, Lq, H*D); softmax scale 1/sqrt(D), no mask."""
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))  # (B, H, Lq, D)
    return out.transpose(1, 2).flatten(2)  # (B, Lq, H*D)


class TokenSpan:
    """The tokens ``[start, start + local)`` of a sequence of ``length`` tokens that this process computes.

    The whole sequence: ``start`` 0, ``local`` = ``length``. A split sequence's last span may run past ``length``
    (padding, so that every process holds the same number of tokens); whatever a model computes for those positions is
    dropped by ``gather`` and never reaches a real token's attention."""

    def __init__(self, length: int, start: int = 0, local: int | None = None):
        self.length = length
        self.start = start
        self.local = length if local is None else local

    def take(self, tokens: Tensor, dim: int) -> Tensor:
        """This span's part of ``tokens``, whose dimension ``dim`` runs over the whole sequence."""
        return tokens

    def attend(self, q: Tensor, k: Tensor, v: Tensor, pattern: HeadAttention | None = None) -> Tensor:
        """Self-attention of this span's queries over the whole sequence: q/k/v (B, local, H, D) of this span's
        tokens -> (B, local, H*D); every query over every key, or as ``pattern`` computes it."""
        return attention(q, k, v) if pattern is None else pattern(q, k, v, 0)

    def attend_summing_heads(self, q: Tensor, k: Tensor, v: Tensor, per_heads: HeadSum) -> tuple[Tensor, Tensor]:
        """``attend``, and ``per_heads`` of the whole sequence's queries and keys summed over all heads (the same on
        every process)."""
        return attention(q, k, v), per_heads(q, k)

    def gather(self, tokens: Tensor, dim: int) -> Tensor:
        """The whole sequence from every process's span of ``tokens`` (padding dropped): ``length`` along ``dim``."""
        return tokens


class TokenSequence:
    """A model's token sequence, held whole by this process (see the module docstring)."""

    def span(self, length: int) -> TokenSpan:
        """The tokens of a sequence of ``length`` this process computes."""
        return TokenSpan(length)


WHOLE = TokenSequence()


def has_token_sequence(model: nn.Module) -> bool:
    """Whether ``model`` writes its token path against a ``TokenSequence`` (its ``sequence`` attribute), so that
    sequence parallelism can be applied to it."""
    return isinstance(getattr(model, "sequence", None), TokenSequence)


def whole_frames(tokens: Tensor, start: int, frame_tokens: int) -> tuple[Tensor, int]:
    """The tokens ``[start, start + L)`` of a frame-major sequence (``frame_tokens`` per frame), grouped by frame:
    (B, L, D) -> (B, n, frame_tokens, D), zero-padded before and after to whole frames, and the index of the first
    frame. A span of a split sequence may begin and end inside a frame; a per-frame computation (each token attends
    to its own frame's context) then runs on whole frames and ``span_of_frames`` takes the span's tokens back."""
    lead = start % frame_tokens
    frames = -(-(lead + tokens.shape[1]) // frame_tokens)
    tail = frames * frame_tokens - lead - tokens.shape[1]
    padded = F.pad(tokens, (0, 0, lead, tail))  # (B, n * frame_tokens, D)
    return padded.unflatten(1, (frames, frame_tokens)), start // frame_tokens


def span_of_frames(grouped: Tensor, start: int, length: int) -> Tensor:
    """Inverse of ``whole_frames``: (B, n, frame_tokens, D) -> the ``length`` tokens from ``start`` (B, length, D)."""
    lead = start % grouped.shape[2]
    return grouped.flatten(1, 2)[:, lead : lead + length]
