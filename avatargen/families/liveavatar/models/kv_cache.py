"""The causal DiT's memory between blocks: per layer, a ring of the last blocks' keys and values (rotated keys),
and the cond cache (the sink's unrotated keys and its values: the reference image and the packed motion).

One :class:`KVCache` belongs to one denoising step (the reference keeps one per step: step i of block n reads the
keys that step i of blocks n-1, n-2, ... wrote), so a step of a block is a function of (block latents, step, that
step's cache) alone. The ring has a fixed size (the reference: one clip's tokens); a block whose tokens start past
its end writes at ``start % size`` and attends to the whole ring, so memory is constant for any length.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor


@dataclass
class LayerCache:
    """One layer's ring (``k``, ``v``: (B, ring, H, D)) and cond cache (``cond_k``, ``cond_v``: (B, Lc, H, D))."""

    k: Tensor
    v: Tensor
    cond_k: Tensor | None = None
    cond_v: Tensor | None = None


@dataclass
class KVCache:
    """All layers' caches of one denoising step."""

    layers: list[LayerCache] = field(default_factory=list)

    @classmethod
    def empty(cls, layers: int, ring_tokens: int, heads: int, head_dim: int, dtype: torch.dtype = torch.float32,
              device: torch.device | str = "cpu") -> KVCache:
        """A zeroed ring of ``ring_tokens`` per layer and no cond cache yet."""
        def zeros() -> Tensor:
            return torch.zeros(1, ring_tokens, heads, head_dim, dtype=dtype, device=device)

        return cls([LayerCache(zeros(), zeros()) for _ in range(layers)])

    @property
    def ring_tokens(self) -> int:
        """The ring's size in tokens."""
        return self.layers[0].k.shape[1]

    def share_cond(self, other: KVCache) -> None:
        """Read ``other``'s cond cache (the reference fills one and every step's cache shares it)."""
        for mine, theirs in zip(self.layers, other.layers):
            mine.cond_k, mine.cond_v = theirs.cond_k, theirs.cond_v

    def state(self) -> dict[str, Tensor]:
        """The rings as named tensors (a resume point's part); the cond cache is recomputed by the sink forward."""
        return {
            "k": torch.stack([layer.k for layer in self.layers]).cpu(),
            "v": torch.stack([layer.v for layer in self.layers]).cpu(),
        }

    def load(self, state: dict[str, Tensor]) -> None:
        """Put back rings saved by :meth:`state`."""
        for i, layer in enumerate(self.layers):
            layer.k.copy_(state["k"][i])
            layer.v.copy_(state["v"][i])

    def window(self, start: int, tokens: int) -> tuple[int, slice]:
        """Where a block of ``tokens`` whose first token is number ``start`` writes (ring index), and which ring
        slots it then attends to (those written so far; the whole ring once it has rolled)."""
        size = self.ring_tokens
        if start >= size:
            return start % size, slice(0, size)
        if start + tokens > size:
            raise ValueError(f"a block of {tokens} tokens at {start} straddles the ring's end ({size}): "
                             "the ring must hold whole blocks")
        return start, slice(0, start + tokens)
