"""InfiniteTalk's audio encoder: transformers' wav2vec2, with the random init a meta-built copy needs.

Kept apart from the spec table (``specs.py``) because importing transformers takes seconds: validating a Wan
config needs only the specs, building its audio encoder needs this.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers import Wav2Vec2Config, Wav2Vec2Model


class Wav2Vec2Encoder(Wav2Vec2Model):
    """transformers' ``Wav2Vec2Model`` (the ``chinese-wav2vec2-base`` tensors load into it by name) with a random
    init that also covers what ``reset_parameters`` cannot reach on a meta-built model: the weight-normed positional
    conv (its ``original0`` / ``original1``) and the unused mask embedding."""

    def init_weights(self) -> None:
        """Seeded init of the tensors ``reset_parameters`` leaves unset (called by ``models.structure.init_random``)."""
        with torch.no_grad():
            self.masked_spec_embed.uniform_()
            conv = self.encoder.pos_conv_embed.conv
            direction = conv.parametrizations.weight.original1  # (C, C / groups, K)
            nn.init.normal_(direction, std=(2.0 / (conv.kernel_size[0] * conv.in_channels)) ** 0.5)
            dims = [d for d in range(direction.dim()) if d != 2]  # weight_norm over dim 2, as wav2vec2 builds it
            conv.parametrizations.weight.original0.copy_(torch.linalg.vector_norm(direction, dim=dims, keepdim=True))
            if conv.bias is not None:
                conv.bias.zero_()


def wav2vec2_config(spec: Any, folder_config: dict[str, Any] | None) -> Wav2Vec2Config:  # spec: a WanFamilySpec
    """The encoder's configuration: the spec's fields, else the downloaded folder's ``config.json``, else
    transformers' base configuration (chinese-wav2vec2-base's shape: 12 layers of 768; for random weights)."""
    if spec.wav2vec2:
        return Wav2Vec2Config(**spec.wav2vec2)
    return Wav2Vec2Config(**(folder_config or {}))
