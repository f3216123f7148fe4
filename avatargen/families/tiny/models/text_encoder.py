"""Byte-level text encoder for the scene / style prompt: tokens -> per-token features and a pooled vector."""

from __future__ import annotations


import torch
from torch import Tensor, nn

from avatargen.families.tiny.models.layers import TransformerBlock
from avatargen.families.tiny.params import TextEncoderParams

BOS_ID = 256
EOS_ID = 257
PAD_ID = 258
VOCAB_SIZE = 259


def tokenize(texts: list[str], max_tokens: int) -> Tensor:
    """UTF-8 bytes framed by BOS/EOS, truncated to ``max_tokens`` (EOS kept), right-padded with PAD to the longest
    sequence of the batch: -> LongTensor (B, L) with L <= max_tokens. ``""`` becomes ``[BOS, EOS]``."""
    if max_tokens < 2:
        raise ValueError(f"max_tokens must be >= 2 (room for BOS and EOS), got {max_tokens}")
    rows = [[BOS_ID, *list(text.encode("utf-8"))[: max_tokens - 2], EOS_ID] for text in texts]
    length = max((len(r) for r in rows), default=2)
    out = torch.full((len(rows), length), PAD_ID, dtype=torch.long)  # (B, L)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


class TextEncoder(nn.Module):
    """Byte embedding + learned positions + pre-norm transformer encoder with a padding mask.

    ``forward(tokens)`` returns the token features (B, L, dim) and their masked mean (B, dim).
    """

    def __init__(self, params: TextEncoderParams) -> None:
        super().__init__()
        self.params = params
        self.embed = nn.Embedding(VOCAB_SIZE, params.dim)
        self.pos = nn.Parameter(torch.zeros(1, params.max_tokens, params.dim))
        self.blocks = nn.ModuleList(TransformerBlock(params.dim, params.heads) for _ in range(params.layers))
        self.norm = nn.LayerNorm(params.dim)
        self.init_weights()

    def init_weights(self) -> None:
        """The model's own init on top of each layer's default (also run after a meta-device build)."""
        nn.init.normal_(self.embed.weight, std=0.02)
        nn.init.normal_(self.pos, std=0.02)

    def forward(self, tokens: Tensor) -> tuple[Tensor, Tensor]:
        """``tokens``: (B, L) from :func:`tokenize` -> (features (B, L, dim), pooled (B, dim))."""
        length = tokens.shape[1]
        if length > self.params.max_tokens:
            raise ValueError(f"{length} tokens exceed max_tokens ({self.params.max_tokens})")
        valid = tokens != PAD_ID  # (B, L)
        x = self.embed(tokens) + self.pos[:, :length]  # (B, L, D)
        mask = valid[:, None, None, :]  # (B, 1, 1, L): queries may attend to non-pad keys only
        for block in self.blocks:
            x = block(x, mask=mask)  # (B, L, D)
        x = self.norm(x)  # (B, L, D)
        weights = valid.unsqueeze(-1).to(x.dtype)  # (B, L, 1)
        pooled = (x * weights).sum(1) / weights.sum(1).clamp_min(1.0)  # (B, D)
        return x, pooled
