"""Full-size Wan models built on the meta device hold exactly the tensors of the original checkpoints.

The expected names and shapes are written here from the reference sources, not read from our modules:
Wan-Video/Wan2.1 ``wan/modules/model.py`` (``WanModel``, ``WanAttentionBlock``, ``WanI2VCrossAttention``, ``Head``,
``MLPProj``) with ``wan/configs/wan_i2v_14B.py`` and the I2V ``config.json`` (in_dim 36); MeiGen-AI/InfiniteTalk
``wan/modules/multitalk_model.py`` (``AudioProjModel`` with audio_window 5, vae_scale 4, intermediate 512, output
768, 32 context tokens, norm_output_audio; per block ``norm_x`` and ``SingleStreamMutiAttention`` with qkv bias and
no q/k norm); ``wan/modules/vae.py`` (``_video_vae``: dim 96, z 16, mult [1, 2, 4, 4], 2 residual blocks).
"""

from __future__ import annotations

import torch

from avatargen.families.wan.models import WanDiT, WanVAE, dit_params, vae_params


def linear(prefix: str, out_features: int, in_features: int) -> dict[str, tuple[int, ...]]:
    return {f"{prefix}.weight": (out_features, in_features), f"{prefix}.bias": (out_features,)}


def vector(prefix: str, size: int, bias: bool) -> dict[str, tuple[int, ...]]:
    return {f"{prefix}.weight": (size,), **({f"{prefix}.bias": (size,)} if bias else {})}


def wan_i2v_14b_tensors(audio: bool) -> dict[str, tuple[int, ...]]:
    dim, ffn, layers, text_dim, freq_dim, in_dim, out_dim = 5120, 13824, 40, 4096, 256, 36, 16
    t = {"patch_embedding.weight": (dim, in_dim, 1, 2, 2), "patch_embedding.bias": (dim,)}
    t |= linear("text_embedding.0", dim, text_dim) | linear("text_embedding.2", dim, dim)
    t |= linear("time_embedding.0", dim, freq_dim) | linear("time_embedding.2", dim, dim)
    t |= linear("time_projection.1", 6 * dim, dim)
    t |= linear("head.head", out_dim * 1 * 2 * 2, dim) | {"head.modulation": (1, 2, dim)}
    t |= vector("img_emb.proj.0", 1280, bias=True) | linear("img_emb.proj.1", 1280, 1280)
    t |= linear("img_emb.proj.3", dim, 1280) | vector("img_emb.proj.4", dim, bias=True)
    for i in range(layers):
        b = f"blocks.{i}"
        t[f"{b}.modulation"] = (1, 6, dim)
        for part in ("q", "k", "v", "o"):
            t |= linear(f"{b}.self_attn.{part}", dim, dim)
        t |= vector(f"{b}.self_attn.norm_q", dim, bias=False) | vector(f"{b}.self_attn.norm_k", dim, bias=False)
        t |= vector(f"{b}.norm3", dim, bias=True)
        for part in ("q", "k", "v", "o", "k_img", "v_img"):
            t |= linear(f"{b}.cross_attn.{part}", dim, dim)
        for norm in ("norm_q", "norm_k", "norm_k_img"):
            t |= vector(f"{b}.cross_attn.{norm}", dim, bias=False)
        t |= linear(f"{b}.ffn.0", ffn, dim) | linear(f"{b}.ffn.2", dim, ffn)
        if audio:
            t |= vector(f"{b}.norm_x", dim, bias=True)
            t |= linear(f"{b}.audio_cross_attn.q_linear", dim, dim)
            t |= linear(f"{b}.audio_cross_attn.kv_linear", 2 * dim, 768)
            t |= linear(f"{b}.audio_cross_attn.proj", dim, dim)
    if audio:
        t |= linear("audio_proj.proj1", 512, 5 * 12 * 768) | linear("audio_proj.proj1_vf", 512, 8 * 12 * 768)
        t |= linear("audio_proj.proj2", 512, 512) | linear("audio_proj.proj3", 32 * 768, 512)
        t |= vector("audio_proj.norm", 768, bias=True)
    return t


def conv(prefix: str, out_channels: int, in_channels: int, *kernel: int) -> dict[str, tuple[int, ...]]:
    return {f"{prefix}.weight": (out_channels, in_channels, *kernel), f"{prefix}.bias": (out_channels,)}


def residual(prefix: str, in_dim: int, out_dim: int) -> dict[str, tuple[int, ...]]:
    t = {f"{prefix}.residual.0.gamma": (in_dim, 1, 1, 1), f"{prefix}.residual.3.gamma": (out_dim, 1, 1, 1)}
    t |= conv(f"{prefix}.residual.2", out_dim, in_dim, 3, 3, 3)
    t |= conv(f"{prefix}.residual.6", out_dim, out_dim, 3, 3, 3)
    if in_dim != out_dim:
        t |= conv(f"{prefix}.shortcut", out_dim, in_dim, 1, 1, 1)
    return t


def attention(prefix: str, dim: int) -> dict[str, tuple[int, ...]]:
    t = {f"{prefix}.norm.gamma": (dim, 1, 1)}
    return t | conv(f"{prefix}.to_qkv", 3 * dim, dim, 1, 1) | conv(f"{prefix}.proj", dim, dim, 1, 1)


def wan_vae_tensors() -> dict[str, tuple[int, ...]]:
    t = conv("conv1", 32, 32, 1, 1, 1) | conv("conv2", 16, 16, 1, 1, 1)
    # encoder: 96 -> [96 x2, down2d] -> [192 x2, down3d] -> [384 x2, down3d] -> [384 x2]
    t |= conv("encoder.conv1", 96, 3, 3, 3, 3)
    e = "encoder.downsamples"
    t |= residual(f"{e}.0", 96, 96) | residual(f"{e}.1", 96, 96) | conv(f"{e}.2.resample.1", 96, 96, 3, 3)
    t |= residual(f"{e}.3", 96, 192) | residual(f"{e}.4", 192, 192) | conv(f"{e}.5.resample.1", 192, 192, 3, 3)
    t |= conv(f"{e}.5.time_conv", 192, 192, 3, 1, 1)
    t |= residual(f"{e}.6", 192, 384) | residual(f"{e}.7", 384, 384) | conv(f"{e}.8.resample.1", 384, 384, 3, 3)
    t |= conv(f"{e}.8.time_conv", 384, 384, 3, 1, 1)
    t |= residual(f"{e}.9", 384, 384) | residual(f"{e}.10", 384, 384)
    t |= residual("encoder.middle.0", 384, 384) | attention("encoder.middle.1", 384)
    t |= residual("encoder.middle.2", 384, 384)
    t |= {"encoder.head.0.gamma": (384, 1, 1, 1)} | conv("encoder.head.2", 32, 384, 3, 3, 3)
    # decoder: 384 -> [384 x3, up3d -> 192] -> [192->384, 384 x2, up3d -> 192] -> [192 x3, up2d -> 96] -> [96 x3]
    t |= conv("decoder.conv1", 384, 16, 3, 3, 3)
    t |= residual("decoder.middle.0", 384, 384) | attention("decoder.middle.1", 384)
    t |= residual("decoder.middle.2", 384, 384)
    u = "decoder.upsamples"
    t |= residual(f"{u}.0", 384, 384) | residual(f"{u}.1", 384, 384) | residual(f"{u}.2", 384, 384)
    t |= conv(f"{u}.3.resample.1", 192, 384, 3, 3) | conv(f"{u}.3.time_conv", 768, 384, 3, 1, 1)
    t |= residual(f"{u}.4", 192, 384) | residual(f"{u}.5", 384, 384) | residual(f"{u}.6", 384, 384)
    t |= conv(f"{u}.7.resample.1", 192, 384, 3, 3) | conv(f"{u}.7.time_conv", 768, 384, 3, 1, 1)
    t |= residual(f"{u}.8", 192, 192) | residual(f"{u}.9", 192, 192) | residual(f"{u}.10", 192, 192)
    t |= conv(f"{u}.11.resample.1", 96, 192, 3, 3)
    t |= residual(f"{u}.12", 96, 96) | residual(f"{u}.13", 96, 96) | residual(f"{u}.14", 96, 96)
    t |= {"decoder.head.0.gamma": (96, 1, 1, 1)} | conv("decoder.head.2", 3, 96, 3, 3, 3)
    return t


def tensors_of(model: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    return {name: tuple(value.shape) for name, value in model.state_dict().items()}


def assert_same_tensors(got: dict, expected: dict) -> None:
    missing, unexpected = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
    assert not missing and not unexpected, f"missing {missing[:5]}, unexpected {unexpected[:5]}"
    wrong = {k: (got[k], expected[k]) for k in expected if got[k] != expected[k]}
    assert not wrong, f"mis-shaped (ours, checkpoint): {dict(list(wrong.items())[:5])}"


def test_infinitetalk_dit_has_the_checkpoint_tensors() -> None:
    with torch.device("meta"):
        model = WanDiT(dit_params("infinitetalk"))
    assert_same_tensors(tensors_of(model), wan_i2v_14b_tensors(audio=True))
    assert model.block_stacks() == [model.blocks] and len(model.blocks) == 40


def test_wan_i2v_14b_dit_has_the_checkpoint_tensors() -> None:
    with torch.device("meta"):
        model = WanDiT(dit_params("wan_i2v_14b"))
    assert_same_tensors(tensors_of(model), wan_i2v_14b_tensors(audio=False))


def test_wan_vae_has_the_checkpoint_tensors() -> None:
    with torch.device("meta"):
        model = WanVAE(vae_params("wan2_1"))
    assert_same_tensors(tensors_of(model), wan_vae_tensors())


def test_meta_build_loads_a_checkpoint_strictly_by_assignment() -> None:
    """A state dict with the checkpoint's names and shapes loads with strict=True, assign=True (no copy)."""
    with torch.device("meta"):
        model = WanVAE(vae_params("wan2_1"))
    state = {name: torch.empty(shape) for name, shape in wan_vae_tensors().items()}
    model.load_state_dict(state, strict=True, assign=True)
    assert all(not p.is_meta for p in model.parameters())
    assert model.encoder.conv1.weight.data_ptr() == state["encoder.conv1.weight"].data_ptr()
