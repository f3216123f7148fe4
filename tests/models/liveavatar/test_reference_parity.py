"""Our LiveAvatar DiT against LiveAvatar's own code (fixtures recorded by record_reference.py at toy size, fp32).

Each check is a step of the reference's block loop: the sink forward that fills the cond cache, a block alone, a
block reading the previous block's keys, a block after the KV ring rolled, a whole 4-step denoise of two blocks (one
ring per step), and a peft LoRA merged into the weights. Tolerance: 1e-4 max abs.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from avatargen.families.liveavatar.models.dit import LiveAvatarDiT
from avatargen.families.liveavatar.models.kv_cache import KVCache
from avatargen.families.liveavatar.models.lora import merge_peft_lora
from avatargen.families.liveavatar.schedule import euler_step, flow_schedule
from tests.models.liveavatar import toy

FIXTURE = Path(__file__).with_name("fixtures") / "reference.safetensors"
TOLERANCE = 1e-4
F = toy.FRAMES_PER_BLOCK


@pytest.fixture(scope="module")
def recorded() -> dict[str, torch.Tensor]:
    return load_file(str(FIXTURE))


def _model(norm3_dtype: str = "float32") -> LiveAvatarDiT:
    """The toy DiT; fp32 before norm3 as the recording ran the reference for the multi-step checks (reference_code)."""
    net = LiveAvatarDiT(replace(toy.PARAMS, norm3_dtype=norm3_dtype)).eval()
    toy.fill(net)
    return net


@pytest.fixture(scope="module")
def model() -> LiveAvatarDiT:
    return _model()


@pytest.fixture(scope="module")
def data() -> dict[str, torch.Tensor]:
    return toy.inputs()


def _cache(net: LiveAvatarDiT) -> KVCache:
    p = net.params
    frame_tokens = (toy.LATENT_SIDE // 2) ** 2
    return KVCache.empty(p.num_layers, toy.RING_BLOCKS * F * frame_tokens, p.num_heads, p.head_dim)


def _sink(net, data, cache) -> torch.Tensor:
    text = net.embed_text(data["context"])
    net.sink(data["ref_latents"], data["motion_latents"], text, cache)
    return text


def _block(net, data, text, cache, block, t, offset, latents=None) -> torch.Tensor:
    if latents is None:
        latents = data["noise"][:, block * F : (block + 1) * F]
    audio = data["audio"][..., block * F * 4 : (block + 1) * F * 4]
    return net.block(latents[None], t, text, audio, cache, block * F, offset)[0]


def _close(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    assert ours.shape == theirs.shape
    return (ours - theirs).abs().max().item()


def test_the_tensor_names_are_the_references() -> None:
    with safe_open(str(FIXTURE), "pt") as f:
        names = dict(item.split("=") for item in f.metadata()["state_dict"].split(";"))
    ours = {k: "x".join(map(str, v.shape)) for k, v in LiveAvatarDiT(toy.PARAMS).state_dict().items()}
    assert ours == names


@torch.no_grad()
def test_sink_fills_the_cond_cache_as_the_reference(model, data, recorded) -> None:
    cache = _cache(model)
    _sink(model, data, cache)
    for i, layer in enumerate(cache.layers):
        assert _close(layer.cond_k, recorded[f"sink.{i}.cond_k"]) <= TOLERANCE
        assert _close(layer.cond_v, recorded[f"sink.{i}.cond_v"]) <= TOLERANCE


@torch.no_grad()
def test_blocks_through_one_ring_match_the_reference(model, data, recorded) -> None:
    """Block 0 alone, block 1 reading block 0's keys, block 2 rolling the ring, block 3 reading the rolled ring."""
    cache = _cache(model)
    text = _sink(model, data, cache)
    t = float(recorded["step.t"])
    for block in range(4):
        (offset,) = recorded[f"step.{block}.offsets"].tolist()
        velocity = _block(model, data, text, cache, block, t, offset)
        assert _close(velocity, recorded[f"step.{block}.velocity"]) <= TOLERANCE, f"block {block}"
        if f"step.{block}.ring_k" in recorded:
            assert _close(cache.state()["k"], recorded[f"step.{block}.ring_k"]) <= TOLERANCE, f"ring after {block}"
            assert _close(cache.state()["v"], recorded[f"step.{block}.ring_v"]) <= TOLERANCE, f"ring after {block}"


@torch.no_grad()
def test_the_bf16_rounding_before_norm3_is_the_references(data, recorded) -> None:
    """The reference's own default: the residual rounded to bf16 before norm3 (one block, one step)."""
    net = _model("bfloat16")
    cache = _cache(net)
    text = _sink(net, data, cache)
    (offset,) = recorded["bf16.offsets"].tolist()
    velocity = _block(net, data, text, cache, 0, float(recorded["step.t"]), offset)
    assert _close(velocity, recorded["bf16.velocity"]) <= TOLERANCE


def test_the_schedule_is_the_references(recorded) -> None:
    timesteps, sigmas = flow_schedule(4, shift=3.0)
    assert _close(timesteps, recorded["schedule.timesteps"]) <= 1e-3
    assert _close(sigmas, recorded["schedule.sigmas"]) <= 1e-6


@torch.no_grad()
def test_a_four_step_denoise_matches_the_reference(model, data, recorded) -> None:
    timesteps, sigmas = flow_schedule(4, shift=3.0)
    caches = [_cache(model) for _ in range(4)]
    text = _sink(model, data, caches[0])
    for cache in caches[1:]:
        cache.share_cond(caches[0])
    for block in range(2):
        offsets = recorded[f"denoise.{block}.offsets"].tolist()
        latents = data["noise"][:, block * F : (block + 1) * F]
        for step in range(4):
            velocity = _block(model, data, text, caches[step], block, timesteps[step], offsets[step], latents)
            latents = euler_step(latents, velocity, sigmas[step], sigmas[step + 1])
        assert _close(latents, recorded[f"denoise.{block}.latents"]) <= TOLERANCE, f"block {block}"


@pytest.mark.parametrize("prefix", ["base_model.model.", ""])
@torch.no_grad()
def test_a_peft_lora_merges_as_the_reference(data, recorded, prefix) -> None:
    net = _model()
    targets = {
        name: tuple(module.weight.shape)
        for name, module in net.named_modules()
        if isinstance(module, torch.nn.Linear) and any(name.endswith(t) for t in toy.LORA_TARGETS)
    }
    assert len(targets) == int(recorded["lora.targets"])
    state = merge_peft_lora(net.state_dict(), toy.lora_state(targets, prefix), alpha=toy.LORA_ALPHA)
    net.load_state_dict(state, strict=True)
    cache = _cache(net)
    text = _sink(net, data, cache)
    (offset,) = recorded["lora.offsets"].tolist()
    velocity = _block(net, data, text, cache, 0, float(recorded["step.t"]), offset)
    assert _close(velocity, recorded["lora.velocity"]) <= TOLERANCE


def test_the_fixture_names_the_reference_commit_it_was_recorded_from() -> None:
    """As the Wan fixtures do: which code the numbers come from (record_reference.py writes it)."""
    import json
    import re

    with safe_open(str(FIXTURE), "pt") as fixture:
        provenance = json.loads(fixture.metadata()["provenance"])
    assert provenance["reference"] == "Alibaba-Quark/LiveAvatar", provenance
    assert re.fullmatch(r"[0-9a-f]{40}", provenance["commit"]), provenance
