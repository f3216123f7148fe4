"""The Wan2.1 family as its open checkpoints ship it, with the original tensor names (architecture only): the video
DiT (T2V / I2V, with the InfiniteTalk/MultiTalk audio adapter), the causal video VAE, the umT5 text encoder, the CLIP
ViT-H/14 vision tower, and InfiniteTalk's wav2vec2 feature path. Their hyper-parameters and named specs are in
params.py, which imports no torch: a config is validated against them before any model is built.

Importing this package costs nothing: its names below are imported (with torch) when one is first asked for (PEP 562)."""

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


def __getattr__(name: str):
    """One of ``__all__``, from the module that defines it."""
    if name not in __all__:  # a submodule's name too: the import system then imports it
        raise AttributeError(f"module 'avatargen.families.wan.models' has no attribute '{name}'")
    from avatargen.families.wan.models import audio_features, audio_proj, clip_vision, dit, params, umt5, vae

    return next(vars(module)[name] for module in (audio_features, audio_proj, clip_vision, dit, umt5, vae, params)
                if name in vars(module))  # fmt: skip
