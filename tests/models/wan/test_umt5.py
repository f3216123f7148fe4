"""The umT5 encoder with the original .pth names vs transformers' UMT5EncoderModel (toy size, random weights, fp32),
and the umT5-XXL tensors as Wan2.1's ``umt5_xxl(encoder_only=True)`` defines them."""

from __future__ import annotations

import pytest
import torch

from avatargen.families.wan.models.params import umt5_params
from avatargen.families.wan.models.umt5 import UMT5Encoder
from tests.models.wan.transformers_keys import umt5_to_transformers


def test_encoder_matches_transformers_umt5() -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    params = umt5_params("umt5_tiny")
    ours = UMT5Encoder(params).eval()
    with torch.no_grad():
        for p in ours.parameters():
            p.add_(0.1 * torch.randn_like(p))
    config = transformers.UMT5Config(
        vocab_size=params.vocab_size, d_model=params.dim, d_kv=params.dim_attn // params.num_heads,
        d_ff=params.dim_ffn, num_layers=params.num_layers, num_heads=params.num_heads,
        relative_attention_num_buckets=params.num_buckets, relative_attention_max_distance=params.max_distance,
        feed_forward_proj="gated-gelu", dropout_rate=0.0, layer_norm_epsilon=params.eps,
    )  # fmt: skip
    oracle = transformers.UMT5EncoderModel(config).eval()
    oracle.load_state_dict(umt5_to_transformers(ours.state_dict()), strict=True)
    # 40 tokens: offsets beyond a quarter of the buckets fall in the shared log-spaced buckets too
    ids = torch.randint(0, params.vocab_size, (2, 40), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, 40, dtype=torch.long)
    mask[1, 25:] = 0  # the second prompt is padded
    with torch.no_grad():
        expected = oracle(input_ids=ids, attention_mask=mask).last_hidden_state
        got = ours(ids, mask)
    assert (got[0] - expected[0]).abs().max().item() <= 1e-4
    assert (got[1, :25] - expected[1, :25]).abs().max().item() <= 1e-4  # the DiT reads the real tokens only
    assert expected.abs().max() > 0.1


def test_umt5_xxl_has_the_checkpoint_tensors() -> None:
    with torch.device("meta"):
        model = UMT5Encoder(umt5_params("umt5_xxl"))
    expected = {"token_embedding.weight": (256384, 4096), "norm.weight": (4096,)}
    for i in range(24):
        b = f"blocks.{i}"
        expected |= {f"{b}.norm1.weight": (4096,), f"{b}.norm2.weight": (4096,)}
        expected |= {f"{b}.attn.{p}.weight": (4096, 4096) for p in "qkvo"}
        expected |= {f"{b}.ffn.gate.0.weight": (10240, 4096), f"{b}.ffn.fc1.weight": (10240, 4096)}
        expected |= {f"{b}.ffn.fc2.weight": (4096, 10240), f"{b}.pos_embedding.embedding.weight": (32, 64)}
    got = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    assert got == expected
