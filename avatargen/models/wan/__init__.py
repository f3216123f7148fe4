"""The Wan2.1 family as its open checkpoints ship it: the video DiT (T2V / I2V, with the InfiniteTalk/MultiTalk
audio adapter) and the causal video VAE, with the original tensor names (architecture only)."""

from avatargen.models.wan.audio_proj import AudioAdapterParams, AudioProjModel, latent_frame_windows
from avatargen.models.wan.dit import DIT_SPECS, WanDiT, WanDiTParams, dit_params
from avatargen.models.wan.vae import VAE_SPECS, VAEStream, WanVAE, WanVAEParams, vae_params

__all__ = [
    "DIT_SPECS",
    "VAE_SPECS",
    "VAEStream",
    "WanVAE",
    "WanVAEParams",
    "vae_params",
    "AudioAdapterParams",
    "AudioProjModel",
    "WanDiT",
    "WanDiTParams",
    "dit_params",
    "latent_frame_windows",
]
