"""The Wan2.1 family as its open checkpoints ship it, with the original tensor names (architecture only): the video
DiT (T2V / I2V, with the InfiniteTalk/MultiTalk audio adapter), the causal video VAE, the umT5 text encoder, the CLIP
ViT-H/14 vision tower, and InfiniteTalk's wav2vec2 feature path."""

from avatargen.families.wan.models.audio_features import frame_windows, wav2vec2_frame_features
from avatargen.families.wan.models.audio_proj import AudioAdapterParams, AudioProjModel, latent_frame_windows
from avatargen.families.wan.models.clip_vision import CLIP_SPECS, CLIPVisionParams, CLIPVisionTower, clip_params, clip_pixels
from avatargen.families.wan.models.dit import DIT_SPECS, WanDiT, WanDiTParams, dit_params
from avatargen.families.wan.models.umt5 import UMT5_SPECS, UMT5Encoder, UMT5Params, umt5_params
from avatargen.families.wan.models.vae import VAE_SPECS, VAEStream, WanVAE, WanVAEParams, vae_params

__all__ = [
    "CLIP_SPECS",
    "DIT_SPECS",
    "UMT5_SPECS",
    "VAE_SPECS",
    "AudioAdapterParams",
    "AudioProjModel",
    "CLIPVisionParams",
    "CLIPVisionTower",
    "UMT5Encoder",
    "UMT5Params",
    "VAEStream",
    "WanDiT",
    "WanDiTParams",
    "WanVAE",
    "WanVAEParams",
    "clip_params",
    "clip_pixels",
    "dit_params",
    "frame_windows",
    "latent_frame_windows",
    "umt5_params",
    "vae_params",
    "wav2vec2_frame_features",
]
