"""avatargen's neural network architectures (architecture only: no I/O, sampling, checkpoints or placement)."""

from avatargen.families.tiny.models.a2v_dit import A2VDiT, A2VDiTParams
from avatargen.families.tiny.models.audio_encoder import AudioEncoder, AudioEncoderParams
from avatargen.families.tiny.models.sr_dit import SRDiT, SRDiTParams
from avatargen.families.tiny.models.text_encoder import TextEncoder, TextEncoderParams, tokenize
from avatargen.families.tiny.models.vae import VAE, CausalConv3d, DecoderCache, VAEParams

# The five models of the default family, by their section of ``model.*`` in the config (in the order they load).
MODEL_CLASSES = {"audio_encoder": AudioEncoder, "text_encoder": TextEncoder, "vae": VAE, "a2v": A2VDiT, "sr": SRDiT}

__all__ = [
    "A2VDiT",
    "A2VDiTParams",
    "AudioEncoder",
    "AudioEncoderParams",
    "CausalConv3d",
    "DecoderCache",
    "MODEL_CLASSES",
    "SRDiT",
    "SRDiTParams",
    "TextEncoder",
    "TextEncoderParams",
    "VAE",
    "VAEParams",
    "tokenize",
]
