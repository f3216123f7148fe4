"""Context generation: the reference identity once per request, then per chunk the audio features and the noise."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from avatargen.families.tiny.models import layers
from avatargen.families.tiny.models import text_encoder as text_encoder_code
from avatargen.families.tiny.models import vae as vae_code
from avatargen.families.tiny.models.text_encoder import tokenize
from avatargen.modules import Module
from avatargen.runtime import precision
from avatargen.stages import inputs
from avatargen.stages.inputs import AudioSamples, image_to_tensor
from avatargen.stages.reference_cache import cached, conditioning_key


@dataclass
class ReferenceContext:
    """What every chunk is conditioned on; computed once per request and kept for the whole render."""

    ref_low: Tensor  # (1, C, h, w) reference latents at the A2V resolution
    ref_high: Tensor  # (1, C, H, W) reference latents at the SR resolution
    text: Tensor  # (1, D_text) pooled prompt embedding


class ContextGenStage:
    """Encodes the reference and prompt (init phase) and the audio of each chunk's window; draws seeded noise."""

    def __init__(self, audio_encoder: Module, text_encoder: Module, vae: Module, seed: int, max_prompt_tokens: int,
                 settings: Any = None, lookahead_frames: int | None = None):  # fmt: skip
        """``settings``: what else shapes the reference encode (the VAE's and text encoder's config sections), for
        the key of its cache (avatargen/stages/reference_cache.py). ``lookahead_frames``: audio frames read past a
        window's end (None: the encoder's whole receptive field; fewer: the rest is heard as silence, so a live
        chunk starts sooner)."""
        self.audio_encoder = audio_encoder
        self.text_encoder = text_encoder
        self.vae = vae
        self.seed = seed
        self.max_prompt_tokens = max_prompt_tokens
        self.settings = settings
        self.device = audio_encoder.device
        self._lookahead = lookahead_frames

    def encode_reference(self, rgb: np.ndarray, prompt: str) -> ReferenceContext:
        """Reference image (uint8, model size) and prompt -> the static conditioning of the request; kept per
        machine, so a picture rendered before with the same prompt is not encoded again (bit for bit the same)."""
        key = conditioning_key(rgb, prompt, (self.vae, self.text_encoder),
                               {"settings": self.settings, "max_prompt_tokens": self.max_prompt_tokens},
                               (sys.modules[__name__], vae_code, text_encoder_code, layers, precision, inputs))  # fmt: skip
        return ReferenceContext(**cached(key, lambda: vars(self._encode_reference(rgb, prompt))))

    @torch.inference_mode()
    def _encode_reference(self, rgb: np.ndarray, prompt: str) -> ReferenceContext:
        image = image_to_tensor(rgb, self.device)  # (1, 3, S, S)
        low_image = F.interpolate(image, scale_factor=0.5, mode="area")  # (1, 3, S/2, S/2)
        with self.vae.active() as vae:
            ref_high = vae.encode(image)  # (1, C, S/8, S/8)
            ref_low = vae.encode(low_image)  # (1, C, S/16, S/16)
        tokens = tokenize([prompt], self.max_prompt_tokens).to(self.device)  # (1, L)
        with self.text_encoder.active() as text_encoder:
            _, pooled = text_encoder(tokens)  # (1, D_text)
        # float32 whatever the compute dtype: the conditioning is kept for the whole render
        return ReferenceContext(ref_low=ref_low.float(), ref_high=ref_high.float(), text=pooled.float())

    @property
    def context_frames(self) -> int:
        """Audio frames the encoder reads on each side of a window (its receptive field)."""
        return int(self.audio_encoder.model.context_frames)

    @property
    def lookahead_frames(self) -> int:
        """Audio frames read past a window's end before it can be encoded (at most ``context_frames``)."""
        return self.context_frames if self._lookahead is None else min(self._lookahead, self.context_frames)

    @torch.inference_mode()
    def audio_features(self, audio: AudioSamples, start: int, end: int) -> Tensor:
        """Per-frame audio features of frames [start, end): (1, T, D_audio), independent of where windows fall."""
        margin, ahead = self.context_frames, self.lookahead_frames
        samples = audio.samples(start - margin, end + ahead)  # (S,)
        if ahead < margin:  # the audio after ``ahead`` is not waited for: heard as silence
            per_frame = samples.shape[0] // (end + ahead - start + margin)
            samples = np.pad(samples, (0, (margin - ahead) * per_frame))
        wave = torch.from_numpy(samples).to(self.device).unsqueeze(0)  # (1, S)
        with self.audio_encoder.active() as encoder:
            features = encoder(wave)  # (1, T + 2R, D)
        return features[:, margin : margin + end - start].float()

    def noise(self, kind: str, index: int, shape: tuple[int, ...]) -> Tensor:
        """Seeded noise for chunk ``kind`` ('N' or 'I') number ``index``: depends only on (seed, kind, index), so a
        chunk's noise is the same however the render is split, resumed or sharded."""
        generator = torch.Generator().manual_seed((self.seed * 1_000_003 + index * 2 + (kind == "I")) % 2**63)
        return torch.randn(shape, generator=generator).to(self.device)
