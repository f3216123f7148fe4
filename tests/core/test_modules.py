"""Checkpoints load strictly: a wrong file is named, with what is missing, unexpected or mis-shaped."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from avatargen.config import load_config, to_config
from avatargen.errors import CheckpointError
from avatargen.modules import Module, save_checkpoint
from avatargen.families.tiny.build import module_specs


@pytest.fixture(scope="module")
def specs():
    return {spec.name: spec for spec in module_specs(to_config(load_config()))}


def test_a_saved_checkpoint_round_trips_as_file_and_folder(tmp_path, specs):
    spec = specs["sr"]
    original = Module.random(spec, seed=3)
    save_checkpoint({"sr": original.model}, tmp_path / "all.safetensors")
    (tmp_path / "folder").mkdir()
    save_file({k: v.contiguous() for k, v in original.model.state_dict().items()}, str(tmp_path / "folder" / "sr.safetensors"))
    for path in (tmp_path / "all.safetensors", tmp_path / "folder"):
        loaded = Module.load(spec, path)
        for (name, a), (_, b) in zip(original.model.state_dict().items(), loaded.model.state_dict().items()):
            assert torch.equal(a, b), name


def test_mismatched_tensors_are_named(tmp_path, specs):
    state = {k: v.clone() for k, v in Module.random(specs["a2v"], 0).model.state_dict().items()}
    missing = sorted(state)[0]
    del state[missing]
    state["blocks.0.attn.bogus"] = torch.zeros(3)
    state["final.linear.weight"] = torch.zeros(5, 5)
    save_file({f"a2v.{k}": v.contiguous() for k, v in state.items()}, str(tmp_path / "bad.safetensors"))
    with pytest.raises(CheckpointError) as error:
        Module.load(specs["a2v"], tmp_path / "bad.safetensors")
    message = str(error.value)
    assert f"missing: {missing}" in message
    assert "unexpected: blocks.0.attn.bogus" in message
    assert "mis-shaped: final.linear.weight (5, 5)" in message
    assert "\n" not in message


def test_truncated_and_absent_checkpoints_fail_cleanly(tmp_path, specs):
    path = tmp_path / "cut.safetensors"
    save_checkpoint({"vae": Module.random(specs["vae"], 0).model}, path)
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match="could not be read"):
        Module.load(specs["vae"], path)
    with pytest.raises(CheckpointError, match="has no 'vae.safetensors'"):
        Module.load(specs["vae"], tmp_path)
