"""The Wan-family avatar models as sets of specs: which DiT, VAE, text encoder, CLIP tower and wav2vec2 make one model.

A model config names one entry (``model.wan.spec``); everything architectural follows from it, so a user only
ever overrides paths, LoRAs and sampling settings. ``wan_tiny`` is the same code at toy sizes (random weights), so
the whole InfiniteTalk path renders on a CPU in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from avatargen.families.wan.models.named_specs import lookup_spec
from avatargen.families.wan.models.params import (CLIPVisionParams, UMT5Params, WanDiTParams, WanVAEParams,
                                                  clip_params, dit_params, umt5_params, vae_params)

WAV2VEC2_TINY: dict[str, Any] = dict(
    hidden_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=32,
    conv_dim=(16,) * 7,
    num_conv_pos_embeddings=16,
    num_conv_pos_embedding_groups=4,
)


@dataclass(frozen=True)
class WanFamilySpec:
    """The five models of one Wan-family avatar model, and the clip geometry its DiT was trained on."""

    dit: WanDiTParams
    vae: WanVAEParams
    text_encoder: UMT5Params
    image_encoder: CLIPVisionParams
    wav2vec2: dict[str, Any] = field(default_factory=dict)  # Wav2Vec2Config fields; {} = the folder's config.json
    clip_frames: int = 81  # video frames per generated clip (1 + 4k: the VAE packs 1, 4, 4, ...)
    motion_frames: int = 9  # last generated frames that start the next clip (1 + 4j)

    def validate(self) -> None:
        """Raise ValueError naming the field when the five specs do not fit together."""
        stride = self.vae.temporal_stride
        for name in ("clip_frames", "motion_frames"):
            value = getattr(self, name)
            if value < 1 or (value - 1) % stride:
                raise ValueError(f"{name} must be 1 + {stride}k frames (the VAE's temporal packing), got {value}")
        if self.motion_frames >= self.clip_frames:
            raise ValueError(f"motion_frames ({self.motion_frames}) must be < clip_frames ({self.clip_frames})")
        if self.dit.text_dim != self.text_encoder.dim:
            raise ValueError(f"the DiT reads text {self.dit.text_dim} wide; the text encoder gives {self.text_encoder.dim}")
        if self.dit.image_to_video and self.dit.clip_dim != self.image_encoder.dim:
            raise ValueError(f"the DiT reads CLIP tokens {self.dit.clip_dim} wide; the tower gives {self.image_encoder.dim}")
        if self.dit.out_dim != self.vae.z_dim:
            raise ValueError(f"the DiT predicts {self.dit.out_dim} channels; the VAE latent has {self.vae.z_dim}")


WAN_FAMILY: dict[str, WanFamilySpec] = {
    "infinitetalk": WanFamilySpec(
        dit=dit_params("infinitetalk"),
        vae=vae_params("wan2_1"),
        text_encoder=umt5_params("umt5_xxl"),
        image_encoder=clip_params("clip_vit_h_14"),
    ),
    "multitalk": WanFamilySpec(
        dit=dit_params("multitalk"),
        vae=vae_params("wan2_1"),
        text_encoder=umt5_params("umt5_xxl"),
        image_encoder=clip_params("clip_vit_h_14"),
        motion_frames=25,  # MultiTalk's long-video loop re-uses more frames than InfiniteTalk's
    ),
    "wan_tiny": WanFamilySpec(
        dit=dit_params("wan_tiny", clip_dim=32),
        vae=vae_params("wan_tiny", num_res_blocks=1),
        text_encoder=umt5_params("umt5_tiny", vocab_size=260),  # 256 bytes + pad, eos, unk, spare
        image_encoder=clip_params("clip_tiny"),
        wav2vec2=WAV2VEC2_TINY,
        clip_frames=13,
        motion_frames=5,
    ),
}


def family_spec(name: str) -> WanFamilySpec:
    """A named spec (``WAN_FAMILY``); ValueError naming the choices if unknown."""
    return lookup_spec(WAN_FAMILY, name, "Wan model")

