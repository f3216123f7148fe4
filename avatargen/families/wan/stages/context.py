"""Wan context: the reference conditioning once per request (prompt states, CLIP tokens, the I2V mask and latent),
a source frame's conditioning per clip when dubbing, and each clip's seeded noise (the audio: ``audio.py``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from avatargen.families.wan.framing import pixels_to_unit_range
from avatargen.families.wan.models.clip_vision import clip_pixels
from avatargen.families.wan.models.conditioning import i2v_mask
from avatargen.families.wan.models.specs import WanFamilySpec
from avatargen.modules import Module
from avatargen.families.wan.stages.text import Tokenizer


@dataclass
class FrameCondition:
    """A clip's image conditioning from one frame (InfiniteTalk: the reference, or the source frame at the clip's
    start when dubbing): its CLIP tokens and the I2V mask and latent of [frame, black frames]."""

    clip_tokens: Tensor  # (1, Li, D_clip)
    condition: Tensor  # (1, 4 + z, T_lat, h, w)


@dataclass
class WanReference:
    """What every clip is conditioned on, computed once per request."""

    text: Tensor  # (1, Lt, D_text) umT5 states of the prompt's real tokens
    negative: Tensor  # (1, Ln, D_text) of the negative prompt
    clip_tokens: Tensor  # (1, Li, D_clip) CLIP tokens of the reference image
    condition: Tensor  # (1, 4 + z, T_lat, h, w): the I2V mask and the latent of [image, black frames]
    image: Tensor  # (1, 3, 1, H, W) in [-1, 1]: the first clip's one given frame and the colour reference

    @property
    def frame_condition(self) -> FrameCondition:
        return FrameCondition(self.clip_tokens, self.condition)


class WanContextStage:
    """Encodes the reference and prompts (init) and each clip's audio; draws each clip's noise from the seed."""

    def __init__(self, spec: WanFamilySpec, text_encoder: Module, image_encoder: Module, vae: Module,
                 tokenizer: Tokenizer, seed: int):  # fmt: skip
        self.spec = spec
        self.text_encoder, self.image_encoder, self.vae = text_encoder, image_encoder, vae
        self.tokenizer = tokenizer
        self.seed = seed
        self.device = vae.device

    @torch.inference_mode()
    def _text(self, prompt: str) -> Tensor:
        ids, mask = self.tokenizer(prompt)  # (1, L), (1, L)
        with self.text_encoder.active() as umt5:
            states = umt5(ids.to(self.device), mask.to(self.device))  # (1, L, D)
        return states[:, : int(mask.sum())].float()  # the real tokens; the DiT zero-pads to text_len

    @torch.inference_mode()
    def encode_given(self, frames: Tensor) -> FrameCondition:
        """Given frames (1, 3, g, H, W) in [-1, 1] -> the CLIP tokens of the last one and the I2V conditioning of a
        clip that starts with them: the mask marks those g frames, the latent is of them followed by black frames
        (InfiniteTalk gives one frame: the reference or a source frame; MultiTalk its motion frames)."""
        with self.image_encoder.active() as clip:
            dtype = next(clip.parameters()).dtype
            clip_tokens = clip(clip_pixels(frames[:, :, -1], self.spec.image_encoder.image_size).to(dtype)).float()
        video = torch.zeros(1, 3, self.spec.clip_frames, *frames.shape[-2:], device=self.device)  # (1, 3, F, H, W)
        video[:, :, : frames.shape[2]] = frames
        with self.vae.active() as vae:
            given, _ = vae.encode(video)  # (1, z, T_lat, h, w), four frames of activations at a time
        mask = i2v_mask(given.shape[2], given.shape[3], given.shape[4], known_frames=frames.shape[2]).to(given)
        return FrameCondition(clip_tokens, torch.cat([mask, given], dim=1))  # (1, Li, D), (1, 4 + z, T_lat, h, w)

    @torch.inference_mode()
    def encode_reference(self, rgb: np.ndarray, prompt: str, negative_prompt: str) -> WanReference:
        """Reference image (uint8 (H, W, 3), framed) and prompts -> the static conditioning of the request."""
        image = pixels_to_unit_range(rgb, self.device)  # (1, 3, 1, H, W) in [-1, 1], the reference's arithmetic
        frame = self.encode_given(image)
        return WanReference(text=self._text(prompt), negative=self._text(negative_prompt),
                            clip_tokens=frame.clip_tokens, condition=frame.condition, image=image)  # fmt: skip

    def noise(self, index: int, shape: tuple[int, ...], seam: bool = False) -> Tensor:
        """Seeded noise of clip ``index`` (or of the seam after it): a function of (seed, index, seam) only, so
        resumed and sharded renders agree."""
        generator = torch.Generator().manual_seed((self.seed * 1_000_003 + index * 2 + int(seam)) % 2**63)
        return torch.randn(shape, generator=generator).to(self.device)
