"""LoRA files merged at load give the model that runs the LoRA's low-rank path beside each weight."""

from __future__ import annotations

import pytest
import torch

from avatargen.families.wan.models import WanDiT, dit_params
from avatargen.families.wan.models.lora import merge_state_dict, parse_lora

SCALE = 1.2  # InfiniteTalk's default --lora_scale


def lora_file(model: WanDiT, rank: int = 4) -> dict[str, torch.Tensor]:
    """A LoRA in InfiniteTalk's naming: low-rank pairs on two linears, a full diff on a norm, a bias diff."""
    g = torch.Generator().manual_seed(7)
    q, ffn = model.blocks[0].self_attn.q, model.blocks[1].ffn[0]
    return {
        "diffusion_model.blocks.0.self_attn.q.lora_down.weight": 0.1 * torch.randn(rank, q.in_features, generator=g),
        "diffusion_model.blocks.0.self_attn.q.lora_up.weight": 0.1 * torch.randn(q.out_features, rank, generator=g),
        "diffusion_model.blocks.0.self_attn.q.alpha": torch.tensor(float(rank)),
        "diffusion_model.blocks.1.ffn.0.lora_A.weight": 0.1 * torch.randn(rank, ffn.in_features, generator=g),
        "diffusion_model.blocks.1.ffn.0.lora_B.weight": 0.1 * torch.randn(ffn.out_features, rank, generator=g),
        "diffusion_model.blocks.0.norm3.diff": 0.1 * torch.randn(model.params.dim, generator=g),
        "diffusion_model.head.head.diff_b": 0.1 * torch.randn(model.head.head.out_features, generator=g),
    }


def test_merged_weights_equal_running_the_lora_beside_them() -> None:
    torch.manual_seed(0)
    model = WanDiT(dit_params("wan_tiny", audio=None)).eval()
    lora = lora_file(model)
    merged = WanDiT(dit_params("wan_tiny", audio=None)).eval()
    merged.load_state_dict(merge_state_dict(model.state_dict(), lora, SCALE), strict=True)
    inputs = (torch.randn(1, 36, 3, 4, 4), torch.tensor([400.0]), torch.randn(1, 5, 32), torch.randn(1, 257, 1280))
    with torch.no_grad():
        base = model(*inputs)

    # the unmerged model with the LoRA as a side path at run time
    def low_rank(down: str, up: str):
        def hook(_module, inputs, output):
            return output + SCALE * (inputs[0] @ lora[down].T) @ lora[up].T

        return hook

    p = "diffusion_model."
    model.blocks[0].self_attn.q.register_forward_hook(
        low_rank(p + "blocks.0.self_attn.q.lora_down.weight", p + "blocks.0.self_attn.q.lora_up.weight")
    )
    model.blocks[1].ffn[0].register_forward_hook(
        low_rank(p + "blocks.1.ffn.0.lora_A.weight", p + "blocks.1.ffn.0.lora_B.weight")
    )
    with torch.no_grad():
        model.blocks[0].norm3.weight += SCALE * lora[p + "blocks.0.norm3.diff"]
        model.head.head.bias += SCALE * lora[p + "head.head.diff_b"]
    with torch.no_grad():
        expected, got = model(*inputs), merged(*inputs)
    assert (got - expected).abs().max().item() <= 1e-4
    assert (got - base).abs().max().item() > 1e-2  # the LoRA changes the output


def test_a_lora_for_another_model_is_refused_with_every_bad_tensor_named() -> None:
    torch.manual_seed(0)
    model = WanDiT(dit_params("wan_tiny", audio=None))
    lora = lora_file(model)
    lora["diffusion_model.blocks.7.self_attn.q.diff_b"] = torch.zeros(64)  # a deeper model's block
    narrower = WanDiT(dit_params("wan_tiny", audio=None, ffn_dim=96))
    with pytest.raises(ValueError) as error:
        merge_state_dict(narrower.state_dict(), lora, SCALE)
    message = str(error.value)
    assert "blocks.7.self_attn.q.bias: not in the model" in message
    assert "blocks.1.ffn.0.weight: the LoRA gives (128, 64), the model has (96, 64)" in message


def test_an_unpaired_low_rank_entry_is_refused() -> None:
    with pytest.raises(ValueError, match="no matching lora_up.weight"):
        parse_lora({"diffusion_model.blocks.0.self_attn.q.lora_down.weight": torch.zeros(4, 64)})


@pytest.mark.parametrize("content", [b"", b"\x89PNG a photo, not a LoRA"], ids=["empty", "foreign"])
def test_a_lora_file_that_is_not_safetensors_is_one_checkpoint_error_naming_it(tmp_path, content) -> None:
    """It was 'unexpected SafetensorError' (exit 1) in a render."""
    from avatargen.config.loader import load_config, to_config
    from avatargen.errors import CheckpointError
    from avatargen.families.wan.sources import dit_source
    from tests.models.wan.wan_tiny_folder import write_wan_tiny_folder

    root = write_wan_tiny_folder(tmp_path / "weights")
    lora = tmp_path / "lora.safetensors"
    lora.write_bytes(content)
    wan = to_config(load_config(["model=wan_tiny", f"model.wan.lora=[{lora}]"])).model.wan
    with pytest.raises(CheckpointError, match=rf"^model.wan.lora: '{lora}' could not be read as safetensors \("):
        dit_source(root, wan)
