"""The CLIP vision tower with the original ``visual.*`` names vs transformers' CLIPVisionModel (toy size, random
weights, fp32), and the ViT-H/14 tensors as Wan2.1's ``clip_xlm_roberta_vit_h_14`` defines them."""

from __future__ import annotations

import pytest
import torch

from avatargen.families.wan.models.clip_vision import CLIPVisionTower, clip_pixels
from avatargen.families.wan.models.params import clip_params
from tests.models.wan.transformers_keys import clip_vision_to_transformers


def test_tower_matches_transformers_clip_vision_at_the_block_wan_reads() -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    params = clip_params("clip_tiny")
    ours = CLIPVisionTower(params).eval()
    with torch.no_grad():
        for p in ours.parameters():
            p.add_(0.1 * torch.randn_like(p))
    config = transformers.CLIPVisionConfig(
        hidden_size=params.dim, intermediate_size=params.dim * params.mlp_ratio, num_hidden_layers=params.num_layers,
        num_attention_heads=params.num_heads, image_size=params.image_size, patch_size=params.patch_size,
        hidden_act="gelu", layer_norm_eps=params.eps,
    )  # fmt: skip
    oracle = transformers.CLIPVisionModel(config).eval()
    state = {k: v for k, v in ours.state_dict().items() if k != "head"}
    prefix = "vision_model." if any(k.startswith("vision_model.") for k in oracle.state_dict()) else ""
    oracle.load_state_dict(clip_vision_to_transformers(state, prefix), strict=True)
    frames = torch.rand(2, 3, 40, 36, generator=torch.Generator().manual_seed(1)) * 2 - 1
    pixels = clip_pixels(frames, params.image_size)
    with torch.no_grad():
        expected = oracle(pixel_values=pixels, output_hidden_states=True).hidden_states[params.layers_used]
        got = ours(pixels)
    assert got.shape == (2, params.tokens, params.dim)
    assert (got - expected).abs().max().item() <= 1e-4


def test_bf16_weights_run_on_a_cpu_close_to_fp32() -> None:
    """``model.wan.dtype=bfloat16`` (the checkpoints' dtype): the tower's LayerNorms compute in fp32 with the bf16
    weights upcast, as the reference's autocast does, so a CPU runs it (it failed with a mixed-dtype error)."""
    torch.manual_seed(0)
    tower = CLIPVisionTower(clip_params("clip_tiny")).eval()
    pixels = clip_pixels(torch.rand(1, 3, 32, 32) * 2 - 1, tower.params.image_size)
    with torch.no_grad():
        full = tower(pixels)
        half = tower.to(torch.bfloat16)(pixels.bfloat16())
    assert half.dtype == torch.bfloat16
    assert (half.float() - full).abs().max().item() <= 0.05 * full.abs().max().item()


def test_vit_h_14_has_the_checkpoint_visual_tensors() -> None:
    """Every ``visual.*`` tensor of models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth, prefix removed."""
    with torch.device("meta"):
        model = CLIPVisionTower(clip_params("clip_vit_h_14"))
    dim, hidden = 1280, 5120
    expected = {
        "patch_embedding.weight": (dim, 3, 14, 14), "cls_embedding": (1, 1, dim), "pos_embedding": (1, 257, dim),
        "pre_norm.weight": (dim,), "pre_norm.bias": (dim,), "post_norm.weight": (dim,), "post_norm.bias": (dim,),
        "head": (dim, 1024),
    }  # fmt: skip
    for i in range(32):
        b = f"transformer.{i}"
        for norm in ("norm1", "norm2"):
            expected |= {f"{b}.{norm}.weight": (dim,), f"{b}.{norm}.bias": (dim,)}
        expected |= {f"{b}.attn.to_qkv.weight": (3 * dim, dim), f"{b}.attn.to_qkv.bias": (3 * dim,)}
        expected |= {f"{b}.attn.proj.weight": (dim, dim), f"{b}.attn.proj.bias": (dim,)}
        expected |= {f"{b}.mlp.0.weight": (hidden, dim), f"{b}.mlp.0.bias": (hidden,)}
        expected |= {f"{b}.mlp.2.weight": (dim, hidden), f"{b}.mlp.2.bias": (dim,)}
    assert {name: tuple(t.shape) for name, t in model.state_dict().items()} == expected
