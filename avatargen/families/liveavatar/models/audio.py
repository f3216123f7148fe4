"""Wan2.2-S2V's audio path, under the reference's names: the causal audio encoder (``casual_audio_encoder``: a
weighted mean of wav2vec2's 25 hidden states, then causal 1D convolutions down to one latent frame's tokens) and the
injector (``audio_injector``: after some blocks, each latent frame's tokens attend to that frame's audio tokens,
normalised by an AdaLN driven by the frame's global audio vector)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from avatargen.families.wan.models.attention import NormedQKVAttention
from avatargen.families.wan.models.dit import fp32_forward
from avatargen.models.sequence import attention

AUDIO_LAYERS = 25  # wav2vec2-large-xlsr-53: the embedding output and 24 layers


class CausalConv1d(nn.Module):
    """A 1D convolution padded on the left only, by repeating the first step (``conv``)."""

    def __init__(self, channels_in: int, channels_out: int, kernel: int = 3, stride: int = 1) -> None:
        super().__init__()
        self.pad = kernel - 1
        self.conv = nn.Conv1d(channels_in, channels_out, kernel, stride=stride)

    def forward(self, x: Tensor) -> Tensor:
        """(B, C, T) -> (B, C', ceil(T / stride)), in fp32 with the weights upcast (the reference's autocast)."""
        conv, bias = self.conv, None if self.conv.bias is None else self.conv.bias.float()
        return F.conv1d(F.pad(x.float(), (self.pad, 0), mode="replicate"), conv.weight.float(), bias, conv.stride)


class AudioTokens(nn.Module):
    """Audio features per video frame -> per latent frame: ``tokens`` local tokens plus a learned padding token, and
    one global vector (``MotionEncoder_tc`` with ``need_global``). Time shrinks 4x through two stride-2 convs."""

    def __init__(self, in_dim: int, dim: int, tokens: int) -> None:
        super().__init__()
        self.tokens = tokens
        self.conv1_local = CausalConv1d(in_dim, dim // 4 * tokens)
        self.conv1_global = CausalConv1d(in_dim, dim // 4)
        self.conv2 = CausalConv1d(dim // 4, dim // 2, stride=2)
        self.conv3 = CausalConv1d(dim // 2, dim, stride=2)
        self.final_linear = nn.Linear(dim, dim)
        self.padding_tokens = nn.Parameter(torch.zeros(1, 1, 1, dim))

    def reset_parameters(self) -> None:
        """The padding token starts at zero, as the reference's (a model built on meta needs it said again)."""
        nn.init.zeros_(self.padding_tokens)

    def _tail(self, x: Tensor) -> Tensor:
        """(N, dim/4, T) after conv1 -> (N, T', dim) through norm, SiLU, conv2, norm, SiLU, conv3, norm, SiLU."""
        x = F.silu(F.layer_norm(x.transpose(1, 2), (x.shape[1],), eps=1e-6)).transpose(1, 2)
        x = self.conv2(x)
        x = F.silu(F.layer_norm(x.transpose(1, 2), (x.shape[1],), eps=1e-6)).transpose(1, 2)
        x = self.conv3(x).transpose(1, 2)  # (N, T', dim)
        return F.silu(F.layer_norm(x, (x.shape[-1],), eps=1e-6))

    def forward(self, features: Tensor) -> tuple[Tensor, Tensor]:
        """(B, T, in_dim) -> global (B, T', 1, dim) and local (B, T', tokens + 1, dim)."""
        b = features.shape[0]
        x = features.transpose(1, 2)  # (B, in_dim, T)
        local = self.conv1_local(x)  # (B, tokens * dim/4, T)
        local = local.unflatten(1, (self.tokens, -1)).flatten(0, 1)  # (B*tokens, dim/4, T)
        local = self._tail(local).unflatten(0, (b, self.tokens)).transpose(1, 2)  # (B, T', tokens, dim)
        local = torch.cat([local, self.padding_tokens.float().expand(b, local.shape[1], 1, -1)], dim=2)
        glob = fp32_forward(self.final_linear, self._tail(self.conv1_global(x)))  # (B, T', dim)
        return glob[:, :, None], local


class CausalAudioEncoder(nn.Module):
    """wav2vec2 hidden states (B, 25, C, T) -> per-latent-frame global and local audio tokens (``weights``: a
    softmax-free SiLU weighting of the layers; ``encoder``)."""

    def __init__(self, in_dim: int, dim: int, tokens: int) -> None:
        super().__init__()
        self.encoder = AudioTokens(in_dim, dim, tokens)
        self.weights = nn.Parameter(torch.full((1, AUDIO_LAYERS, 1, 1), 0.01))

    def reset_parameters(self) -> None:
        """The reference's init: every layer weighted 0.01."""
        nn.init.constant_(self.weights, 0.01)

    def forward(self, features: Tensor) -> tuple[Tensor, Tensor]:
        """(B, 25, C, T) -> global (B, T', 1, dim), local (B, T', tokens + 1, dim), in fp32."""
        weights = F.silu(self.weights.float())
        mixed = (features.float() * weights / weights.sum(dim=1, keepdim=True)).sum(dim=1)  # (B, C, T)
        return self.encoder(mixed.transpose(1, 2))


class AudioCrossAttention(NormedQKVAttention):
    """One injector (``audio_injector.injector.N``): Wan's cross-attention with q/k RMS norms."""

    def forward(self, x: Tensor, context: Tensor) -> Tensor:
        """(N, L, dim) attending to (N, Lc, dim) -> (N, L, dim)."""
        return self.o(attention(self.queries(x), *self.keys_values(context)))


class AdaNorm(nn.Module):
    """diffusers' ``AdaLayerNorm`` (chunk_dim=1) as the injector uses it: LayerNorm (eps 1e-5, no affine) shifted
    and scaled by ``linear(silu(vector))`` (shift first)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.linear = nn.Linear(dim, 2 * dim)

    def forward(self, x: Tensor, vector: Tensor) -> Tensor:
        """``x`` (N, L, dim), ``vector`` (N, dim) -> (N, L, dim)."""
        shift, scale = self.linear(F.silu(vector)).chunk(2, dim=1)
        return F.layer_norm(x, (x.shape[-1],), eps=1e-5) * (1 + scale[:, None]) + shift[:, None]


class AudioInjector(nn.Module):
    """The injectors of the blocks listed in ``layers`` (``injector``, ``injector_adain_layers``)."""

    def __init__(self, dim: int, heads: int, layers: tuple[int, ...]) -> None:
        super().__init__()
        self.slot = {layer: i for i, layer in enumerate(layers)}
        self.injector = nn.ModuleList([AudioCrossAttention(dim, heads, 1e-6) for _ in layers])
        self.injector_adain_layers = nn.ModuleList([AdaNorm(dim) for _ in layers])

    def forward(self, layer: int, x: Tensor, local: Tensor, glob: Tensor) -> Tensor:
        """After block ``layer``: ``x`` (B, F*S, dim) the block's tokens, ``local`` (B, F, n, dim), ``glob``
        (B, F, 1, dim) -> ``x`` plus each frame's audio attention (unchanged after a block without an injector)."""
        slot = self.slot.get(layer)
        if slot is None:
            return x
        b, frames = local.shape[:2]
        per_frame = x.reshape(b * frames, -1, x.shape[-1])  # (B*F, S, dim)
        normed = self.injector_adain_layers[slot](per_frame, glob.flatten(0, 1)[:, 0])
        out = self.injector[slot](normed, local.flatten(0, 1))  # (B*F, S, dim)
        return x + out.reshape(x.shape)
