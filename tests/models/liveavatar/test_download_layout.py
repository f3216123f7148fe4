"""The DiT as a user downloads it (``ckpt/Wan2.2-S2V-14B/diffusion_pytorch_model-*.safetensors`` shards and
``ckpt/LiveAvatar/liveavatar.safetensors``, a peft LoRA): read tensor by tensor with the LoRA merged as the reference
merges it, loaded strictly; a LoRA that does not fit is refused in one line."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from safetensors.torch import save_file

from avatargen.errors import CheckpointError
from avatargen.families.liveavatar.build import SPECS, dit_source
from avatargen.families.liveavatar.config import LiveAvatarModelConfig
from avatargen.families.liveavatar.models.dit import LiveAvatarDiT
from avatargen.families.liveavatar.models.lora import merge_peft_lora
from tests.models.liveavatar import toy


def _folder(tmp_path, lora_shape_error: bool = False):
    net = LiveAvatarDiT(SPECS["liveavatar_tiny"].dit)
    toy.fill(net)
    state = {k: v.contiguous() for k, v in net.state_dict().items()}
    names = sorted(state)
    s2v = tmp_path / "Wan2.2-S2V-14B"
    s2v.mkdir()
    half = len(names) // 2
    for i, part in enumerate((names[:half], names[half:])):
        save_file({k: state[k] for k in part}, str(s2v / f"diffusion_pytorch_model-0000{i + 1}-of-00002.safetensors"))
    targets = {name: tuple(m.weight.shape) for name, m in net.named_modules()
               if isinstance(m, torch.nn.Linear) and any(name.endswith(t) for t in toy.LORA_TARGETS)}  # fmt: skip
    lora = toy.lora_state(targets)
    if lora_shape_error:
        key = next(k for k in lora if "lora_A" in k)
        lora[key] = torch.zeros(toy.LORA_RANK, 7)
    (tmp_path / "LiveAvatar").mkdir()
    save_file(lora, str(tmp_path / "LiveAvatar" / "liveavatar.safetensors"))
    return state, lora


def test_the_shards_load_strictly_with_the_lora_merged(tmp_path) -> None:
    state, lora = _folder(tmp_path)
    source = dit_source(tmp_path, replace(LiveAvatarModelConfig(), lora_alpha=toy.LORA_ALPHA))
    read = {name: source.read(name) for name in source.shapes()}
    expected = merge_peft_lora(state, lora, alpha=toy.LORA_ALPHA)
    assert set(read) == set(expected)
    changed = [n for n in expected if not torch.equal(expected[n], state[n])]
    assert len(changed) == len(lora) // 2  # every pair landed on its weight
    for name in expected:
        assert torch.equal(read[name], expected[name]), name
    LiveAvatarDiT(SPECS["liveavatar_tiny"].dit).load_state_dict(read, strict=True)


def test_a_lora_that_does_not_fit_is_refused_in_one_line(tmp_path) -> None:
    _folder(tmp_path, lora_shape_error=True)
    with pytest.raises(CheckpointError, match="does not fit this DiT") as error:
        dit_source(tmp_path, LiveAvatarModelConfig())
    assert "\n" not in str(error.value)


def test_a_missing_lora_names_where_to_put_it(tmp_path) -> None:
    _folder(tmp_path)
    (tmp_path / "LiveAvatar" / "liveavatar.safetensors").unlink()
    with pytest.raises(CheckpointError, match="Quark-Vision/Live-Avatar"):
        dit_source(tmp_path, LiveAvatarModelConfig())
