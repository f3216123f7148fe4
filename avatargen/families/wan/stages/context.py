"""Wan context: the reference conditioning once per request (prompt states, CLIP tokens, the I2V mask and latent),
then per clip the wav2vec2 feature windows of its frames and its seeded noise."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from avatargen.families.wan.models.audio_features import frame_windows, wav2vec2_frame_features
from avatargen.families.wan.models.clip_vision import clip_pixels
from avatargen.families.wan.models.conditioning import i2v_mask
from avatargen.families.wan.models.specs import WanFamilySpec
from avatargen.modules import Module
from avatargen.stages.inputs import AudioSamples, image_to_tensor
from avatargen.families.wan.stages.text import Tokenizer


@dataclass
class WanReference:
    """What every clip is conditioned on, computed once per request."""

    text: Tensor  # (1, Lt, D_text) umT5 states of the prompt's real tokens
    negative: Tensor  # (1, Ln, D_text) of the negative prompt
    clip_tokens: Tensor  # (1, Li, D_clip) CLIP tokens of the reference image
    condition: Tensor  # (1, 4 + z, T_lat, h, w): the I2V mask and the latent of [image, black frames]
    image: Tensor  # (1, 3, 1, H, W) in [-1, 1]: the first clip's one given frame and the colour reference


class WanContextStage:
    """Encodes the reference and prompts (init) and each clip's audio; draws each clip's noise from the seed."""

    def __init__(self, spec: WanFamilySpec, audio_encoder: Module, text_encoder: Module, image_encoder: Module,
                 vae: Module, tokenizer: Tokenizer, seed: int, fps: int, audio_context_frames: int):  # fmt: skip
        self.spec = spec
        self.audio_encoder, self.text_encoder, self.image_encoder, self.vae = audio_encoder, text_encoder, image_encoder, vae
        self.tokenizer = tokenizer
        self.seed = seed
        self.fps = fps
        self.context_frames = audio_context_frames
        self.device = vae.device

    @torch.inference_mode()
    def _text(self, prompt: str) -> Tensor:
        ids, mask = self.tokenizer(prompt)  # (1, L), (1, L)
        with self.text_encoder.active() as umt5:
            states = umt5(ids.to(self.device), mask.to(self.device))  # (1, L, D)
        return states[:, : int(mask.sum())].float()  # the real tokens; the DiT zero-pads to text_len

    @torch.inference_mode()
    def encode_reference(self, rgb: np.ndarray, prompt: str, negative_prompt: str) -> WanReference:
        """Reference image (uint8 (S, S, 3)) and prompts -> the static conditioning of the request."""
        image = image_to_tensor(rgb, self.device)  # (1, 3, S, S) in [-1, 1]
        with self.image_encoder.active() as clip:
            dtype = next(clip.parameters()).dtype
            clip_tokens = clip(clip_pixels(image, self.spec.image_encoder.image_size).to(dtype)).float()  # (1, Li, D)
        frames = self.spec.clip_frames
        video = torch.zeros(1, 3, frames, *image.shape[-2:], device=self.device)  # (1, 3, F, S, S): black
        video[:, :, 0] = image
        with self.vae.active() as vae:
            given, _ = vae.encode(video)  # (1, z, T_lat, h, w), four frames of activations at a time
        mask = i2v_mask(given.shape[2], given.shape[3], given.shape[4], known_frames=1).to(given)  # (1, 4, T_lat, h, w)
        return WanReference(
            text=self._text(prompt), negative=self._text(negative_prompt), clip_tokens=clip_tokens,
            condition=torch.cat([mask, given], dim=1), image=image[:, :, None],
        )  # fmt: skip

    @torch.inference_mode()
    def audio_windows(self, audio: AudioSamples, start: int, stop: int) -> Tensor:
        """The DiT's audio input for video frames [start, stop): (1, stop - start, 5, layers, C).

        wav2vec2 hears the clip plus ``context_frames`` on each side (zeros before the audio starts and after it
        ends), never the whole file: memory per clip is constant, and features do not depend on the audio length.
        """
        margin = self.context_frames
        samples = torch.from_numpy(audio.samples(start - margin, stop + margin)).to(self.device)[None]  # (1, N)
        with self.audio_encoder.active() as wav2vec2:
            features = wav2vec2_frame_features(wav2vec2, samples, fps=self.fps)  # (1, frames, layers, C)
        return frame_windows(features[0], margin, margin + stop - start)[None]  # (1, F, 5, layers, C)

    def noise(self, index: int, shape: tuple[int, ...], seam: bool = False) -> Tensor:
        """Seeded noise of clip ``index`` (or of the seam after it): a function of (seed, index, seam) only, so
        resumed and sharded renders agree."""
        generator = torch.Generator().manual_seed((self.seed * 1_000_003 + index * 2 + int(seam)) % 2**63)
        return torch.randn(shape, generator=generator).to(self.device)
