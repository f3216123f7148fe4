"""InfiniteTalk/MultiTalk audio projection: wav2vec2 feature windows -> audio context tokens per latent frame.

Input (as InfiniteTalk feeds it): for every *video* frame, a window of ``audio_window`` (5) wav2vec2 feature frames
centred on it, each holding all ``layers`` (12) hidden states of width ``channels`` (768). The VAE packs video frames
into latent frames as 1, 4, 4, ... (``vae_scale``), so the first latent frame sees one 5-frame window and each later
latent frame the 8 features its four video frames cover: the first half of the first frame's window (3), the
centres of the two middle frames (1 + 1) and the second half of the last frame's window (3).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from avatargen.families.wan.models.params import AudioAdapterParams


def latent_frame_windows(audio: Tensor, params: AudioAdapterParams) -> tuple[Tensor, Tensor]:
    """Per-video-frame windows -> (first latent frame's window, the later latent frames' windows).

    ``audio`` (B, 1 + vae_scale * N, audio_window, layers, channels) ->
    ``first`` (B, 1, audio_window, layers, channels) and ``later`` (B, N, later_window, layers, channels).
    """
    frames = audio.shape[1]
    if (frames - 1) % params.vae_scale:
        raise ValueError(f"audio covers {frames} video frames; it must be 1 + {params.vae_scale} * N")
    centre = params.audio_window // 2
    first = audio[:, :1]  # (B, 1, w, layers, C)
    groups = audio[:, 1:].unflatten(1, (-1, params.vae_scale))  # (B, N, s, w, layers, C)
    later = torch.cat(
        [
            groups[:, :, 0, : centre + 1],  # (B, N, centre+1, layers, C): first frame, up to its centre
            groups[:, :, 1:-1, centre],  # (B, N, s-2, layers, C): middle frames, their centres
            groups[:, :, -1, centre:],  # (B, N, w-centre, layers, C): last frame, from its centre
        ],
        dim=2,
    )  # (B, N, later_window, layers, C)
    return first, later


class AudioProjModel(nn.Module):
    """Feature windows -> ``context_tokens`` audio tokens per latent frame (``audio_proj.*`` in the checkpoints)."""

    def __init__(self, params: AudioAdapterParams) -> None:
        super().__init__()
        params.validate()
        self.params = params
        features = params.layers * params.channels
        self.proj1 = nn.Linear(params.audio_window * features, params.intermediate_dim)
        self.proj1_vf = nn.Linear(params.later_window * features, params.intermediate_dim)
        self.proj2 = nn.Linear(params.intermediate_dim, params.intermediate_dim)
        self.proj3 = nn.Linear(params.intermediate_dim, params.context_tokens * params.output_dim)
        self.norm = nn.LayerNorm(params.output_dim) if params.norm_output else nn.Identity()

    def forward(self, audio: Tensor) -> Tensor:
        """(B, 1 + vae_scale * N, audio_window, layers, channels) -> (B, 1 + N, context_tokens, output_dim)."""
        first, later = latent_frame_windows(audio, self.params)
        first = torch.relu(self.proj1(first.flatten(2)))  # (B, 1, inter)
        later = torch.relu(self.proj1_vf(later.flatten(2)))  # (B, N, inter)
        hidden = torch.relu(self.proj2(torch.cat([first, later], dim=1)))  # (B, 1+N, inter)
        tokens = self.proj3(hidden).unflatten(-1, (self.params.context_tokens, self.params.output_dim))
        return self.norm(tokens)  # (B, 1+N, tokens, output_dim)
