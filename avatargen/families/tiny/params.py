"""The hyper-parameters of the bundled family's five models (the ``model.*`` sections of its config), apart from
the models themselves so that a config loads and validates without torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

ATTENTION_KINDS = ("axial", "full")  # the A2V's self-attention (``A2VDiTParams.attention``)


@dataclass
class AudioEncoderParams:
    """Hyper-parameters of :class:`AudioEncoder`."""

    sample_rate: int = 16000
    fps: int = 25
    n_fft: int = 512
    hop_length: int = 160
    n_mels: int = 40
    dim: int = 128
    layers: int = 3
    out_dim: int = 128


@dataclass
class TextEncoderParams:
    """Hyper-parameters of :class:`TextEncoder`."""

    max_tokens: int = 64
    dim: int = 128
    layers: int = 2
    heads: int = 4


@dataclass
class VAEParams:
    """Hyper-parameters of :class:`VAE`. ``widths`` run from the latent resolution up to full resolution."""

    latent_channels: int = 8
    widths: list[int] = field(default_factory=lambda: [96, 48, 24])
    blocks_per_level: int = 1
    temporal_kernel: int = 3
    # The decoder's own widths, as many levels as ``widths`` (None: ``widths``). The decoder runs on every frame
    # rendered, the encoder only on the reference, so the decoder may be the narrower of the two (the shipped one is).
    decoder_widths: Optional[list[int]] = field(default_factory=lambda: [48, 32, 16])

    @property
    def decoder_levels(self) -> list[int]:
        """The decoder's widths, from the latent resolution up."""
        return list(self.decoder_widths) if self.decoder_widths is not None else list(self.widths)


@dataclass
class A2VDiTParams:
    """Hyper-parameters of :class:`A2VDiT`."""

    latent_channels: int = 8
    latent_size: int = 16
    patch_size: int = 2
    dim: int = 192
    depth: int = 4
    heads: int = 4
    mlp_ratio: float = 4.0
    audio_dim: int = 128
    audio_window: int = 2
    text_dim: int = 128
    # self-attention: "axial" (heads // 2 heads within each frame and the reference frame, the rest along time; 1/16
    # of full attention's scores for an 18-frame window) or "full" (every token over every token, what checkpoints
    # trained before it was added use: docs/model-card.md, "Frame-axial attention")
    attention: str = "axial"


@dataclass
class SRDiTParams:
    """Hyper-parameters of :class:`SRDiT`. ``face_box`` is (x0, y0, x1, y1) in [0, 1] image coordinates."""

    latent_channels: int = 8
    low_size: int = 16
    high_size: int = 32
    patch_size: int = 4
    dim: int = 128
    depth: int = 3
    heads: int = 4
    mlp_ratio: float = 4.0
    face_box: list[float] = field(default_factory=lambda: [0.25, 0.35, 0.75, 0.95])
    face_patch_size: int = 2
    face_depth: int = 2
