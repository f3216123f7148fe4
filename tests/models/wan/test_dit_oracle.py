"""Our Wan2.1 DiT against diffusers' WanTransformer3DModel: same random weights (through the documented key mapping),
same inputs, fp32, at toy size."""

from __future__ import annotations

import pytest
import torch

from avatargen.families.wan.models import WanDiT, dit_params
from tests.models.wan.diffusers_keys import dit_to_diffusers

diffusers = pytest.importorskip("diffusers")

TOLERANCE = 1e-4


def perturbed(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Move every weight off its initial value (norm scales off 1, biases off 0) so a mis-mapped tensor shows."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.1 * torch.randn(param.shape, generator=generator))
    return model


def toy_params(**overrides):
    # text_len 512: diffusers hard-codes the 512 text tokens when it splits image from text context.
    return dit_params("wan_tiny", text_len=512, **overrides)


def oracle_for(ours: WanDiT):
    p = ours.params
    oracle = diffusers.WanTransformer3DModel(
        patch_size=p.patch_size,
        num_attention_heads=p.num_heads,
        attention_head_dim=p.head_dim,
        in_channels=p.in_dim,
        out_channels=p.out_dim,
        text_dim=p.text_dim,
        freq_dim=p.freq_dim,
        ffn_dim=p.ffn_dim,
        num_layers=p.num_layers,
        cross_attn_norm=True,
        qk_norm="rms_norm_across_heads",
        eps=p.eps,
        image_dim=1280 if p.image_to_video else None,
        added_kv_proj_dim=p.dim if p.image_to_video else None,
    )
    oracle.load_state_dict(dit_to_diffusers(ours.state_dict()), strict=True)
    return oracle.eval()


def inputs(params, seed: int = 1):
    generator = torch.Generator().manual_seed(seed)
    latents = torch.randn(2, params.in_dim, 3, 4, 6, generator=generator)  # grid (3, 2, 3) after (1, 2, 2) patches
    timesteps = torch.tensor([999.0, 137.5])
    text = torch.randn(2, 7, params.text_dim, generator=generator)
    clip = torch.randn(2, 257, 1280, generator=generator)
    return latents, timesteps, text, clip


def padded(text: torch.Tensor, length: int) -> torch.Tensor:
    return torch.cat([text, text.new_zeros(text.shape[0], length - text.shape[1], text.shape[2])], dim=1)


@pytest.mark.parametrize("image_to_video", [True, False], ids=["i2v", "t2v"])
def test_backbone_matches_diffusers(image_to_video: bool) -> None:
    torch.manual_seed(0)
    params = toy_params(audio=None, image_to_video=image_to_video, in_dim=36 if image_to_video else 16)
    ours = perturbed(WanDiT(params)).eval()
    oracle = oracle_for(ours)
    latents, timesteps, text, clip = inputs(params)
    clip = clip if image_to_video else None
    with torch.no_grad():
        expected = oracle(latents, timesteps, padded(text, 512), encoder_hidden_states_image=clip, return_dict=False)[0]
        got = ours(latents, timesteps, text, clip)
    assert got.shape == expected.shape == (2, 16, 3, 4, 6)
    assert expected.abs().max() > 0.1  # a real signal, not a zero head
    assert (got - expected).abs().max().item() <= TOLERANCE


def test_zeroed_audio_adapter_leaves_the_backbone_unchanged() -> None:
    """With the adapter's output projection at zero, the InfiniteTalk model is the plain Wan I2V model."""
    torch.manual_seed(0)
    ours = perturbed(WanDiT(toy_params())).eval()
    for block in ours.blocks:
        torch.nn.init.zeros_(block.audio_cross_attn.proj.weight)
        torch.nn.init.zeros_(block.audio_cross_attn.proj.bias)
    oracle = oracle_for(ours)
    latents, timesteps, text, clip = inputs(ours.params)
    audio = torch.randn(2, 9, 5, 2, 16)  # 1 + 4 * 2 video frames for 3 latent frames
    with torch.no_grad():
        expected = oracle(latents, timesteps, padded(text, 512), encoder_hidden_states_image=clip, return_dict=False)[0]
        got = ours(latents, timesteps, text, clip, audio)
    assert (got - expected).abs().max().item() <= TOLERANCE


def test_our_key_mapping_agrees_with_diffusers_converter() -> None:
    """diffusers' own original->diffusers converter gives the same names as the mapping the tests use."""
    from diffusers.loaders.single_file_utils import convert_wan_transformer_to_diffusers

    state = WanDiT(toy_params(audio=None)).state_dict()
    theirs = convert_wan_transformer_to_diffusers(dict(state))
    assert sorted(theirs) == sorted(dit_to_diffusers(state))
