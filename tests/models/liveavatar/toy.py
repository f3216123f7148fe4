"""The toy LiveAvatar DiT both sides of the parity tests build, and the weights both fill it with.

The reference (Alibaba-Quark/LiveAvatar ``CausalWanModel_S2V``) and ours keep the same tensor names, so one seeded fill
keyed by name gives both models the same weights without storing them: each tensor is drawn from its own generator
(seeded by the name), so the values do not depend on the order or the set of other tensors.
"""

from __future__ import annotations

import zlib

import torch

from avatargen.families.liveavatar.models.params import LiveAvatarParams

# the reference's constructor arguments at toy size (Wan2.2-S2V's layout: framepack, adain, zero timestep, pose cond)
TOY = dict(
    dim=32,
    ffn_dim=64,
    num_heads=2,
    num_layers=3,
    freq_dim=16,
    text_dim=16,
    text_len=8,
    in_dim=16,
    out_dim=16,
    audio_dim=16,
    num_audio_token=4,
    audio_inject_layers=[0, 2],
    cond_dim=16,
)
# ours, the same model
PARAMS = LiveAvatarParams(**{k: tuple(v) if isinstance(v, list) else v for k, v in TOY.items()})
LATENT_SIDE = 8  # latent grid 8x8: 16 tokens a latent frame (patch 2x2); the frame packer's 4x bucket needs 8
FRAMES_PER_BLOCK = 3
RING_BLOCKS = 2  # the KV ring holds two blocks: the third block rolls it
AUDIO_LAYERS = 25  # wav2vec2-large's 24 layers + the embedding output, fixed in the reference's audio encoder
LORA_RANK = 4
LORA_ALPHA = 2.0
LORA_TARGETS = ("q", "k", "v", "o", "ffn.0", "ffn.2")


def fill_value(name: str, shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    """A deterministic fp32 value for tensor ``name``: scaled normal (1/sqrt(fan-in)) for matrices and kernels,
    1 + 0.1 N for norm scales, positive for the audio encoder's layer weights, 0.1 N for other vectors."""
    generator = torch.Generator().manual_seed(zlib.crc32(name.encode()) + seed)
    noise = torch.randn(shape, generator=generator)
    if name.endswith("casual_audio_encoder.weights"):
        return 0.5 + 0.1 * noise
    if len(shape) >= 2:
        fan_in = max(1, int(torch.tensor(shape[1:]).prod()))
        return noise / fan_in**0.5
    if "norm" in name:
        return 1 + 0.1 * noise
    return 0.1 * noise


def fill(module: torch.nn.Module, seed: int = 0) -> None:
    """Overwrite every parameter of ``module`` with ``fill_value`` of its name."""
    with torch.no_grad():
        for name, tensor in module.state_dict().items():
            if tensor.is_floating_point():
                tensor.copy_(fill_value(name, tuple(tensor.shape), seed))


def lora_state(target_shapes: dict[str, tuple[int, ...]], prefix: str = "base_model.model.") -> dict[str, torch.Tensor]:
    """A peft LoRA file for the toy model: ``<module>.lora_A.default.weight`` (r, in) and ``lora_B`` (out, r) for each
    target (``target_shapes``: module name -> its weight's (out, in)); the values do not depend on ``prefix``."""
    state = {}
    for module, (out_features, in_features) in sorted(target_shapes.items()):
        a = f"{module}.lora_A.default.weight"
        b = f"{module}.lora_B.default.weight"
        state[prefix + a] = fill_value(a, (LORA_RANK, in_features))
        state[prefix + b] = fill_value(b, (out_features, LORA_RANK))
    return state


def inputs(seed: int = 1) -> dict[str, torch.Tensor]:
    """The toy inputs: reference latent, 19 motion latents, prompt states, six blocks' noise and audio features."""
    g = torch.Generator().manual_seed(seed)
    side = LATENT_SIDE
    return {
        "ref_latents": torch.randn(1, 16, 1, side, side, generator=g),
        "motion_latents": torch.randn(1, 16, 19, side, side, generator=g),
        "context": torch.randn(1, 5, TOY["text_dim"], generator=g),
        "noise": torch.randn(16, 6 * FRAMES_PER_BLOCK, side, side, generator=g),
        "audio": torch.randn(1, AUDIO_LAYERS, TOY["audio_dim"], 6 * FRAMES_PER_BLOCK * 4, generator=g),
    }
