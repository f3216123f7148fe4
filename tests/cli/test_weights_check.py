"""`avatargen weights check DIR model=...`: a Wan weights folder checked from its file headers, one line per problem."""

from __future__ import annotations

import json

import torch
from safetensors.torch import save_file

from avatargen.families.wan.config import WAN_DIR
from tests.conftest import run_cli
from tests.models.wan.wan_tiny_folder import write_wan_tiny_folder

MODULES = ["audio_encoder", "text_encoder", "image_encoder", "vae", "dit"]


def test_a_complete_folder_checks_clean_with_counts_per_module(tmp_path):
    root = write_wan_tiny_folder(tmp_path / "weights")
    result = run_cli("weights", "check", str(root), "model=wan_tiny", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] and report["problems"] == []
    modules = {m["module"]: m for m in report["modules"]}
    assert sorted(modules) == sorted(MODULES)
    assert modules["dit"]["dtypes"] == {"BF16": sum(modules["dit"]["dtypes"].values())}
    assert modules["dit"]["stored_bytes"] == 2 * modules["dit"]["parameters"]  # bf16, every tensor found
    assert modules["image_encoder"]["dtypes"] == {"float16": sum(modules["image_encoder"]["dtypes"].values())}


def test_each_problem_is_one_line_and_the_exit_code_is_2(tmp_path):
    root = write_wan_tiny_folder(tmp_path / "weights")
    (root / "InfiniteTalk/single/infinitetalk.safetensors").unlink()  # the adapter was not downloaded
    vae = torch.load(root / WAN_DIR / "Wan2.1_VAE.pth", weights_only=True)
    vae["conv2.weight"] = torch.zeros(16, 16, 1, 1, 2)  # a wrong shape
    torch.save(vae, root / WAN_DIR / "Wan2.1_VAE.pth")
    save_file({"diffusion_model.blocks.0.ffn.0.lora_down.weight": torch.zeros(2, 7),
               "diffusion_model.blocks.0.ffn.0.lora_up.weight": torch.zeros(128, 2)}, tmp_path / "other.safetensors")  # fmt: skip
    result = run_cli("weights", "check", str(root), "model=wan_tiny", f"model.wan.lora=[{tmp_path / 'other.safetensors'}]")
    assert result.returncode == 2
    problems = [line for line in result.stderr.splitlines() if line.startswith("problem: ")]
    assert "problem: dit: missing file InfiniteTalk/single/infinitetalk.safetensors" in problems
    assert "problem: dit: missing tensor audio_proj.proj1.weight" in problems
    assert "problem: vae: tensor conv2.weight is (16, 16, 1, 1, 2) in the file, the model has (16, 16, 1, 1, 1)" in problems
    assert any(line.startswith("problem: lora: ") and "blocks.0.ffn.0.weight" in line for line in problems)
    assert not any("text_encoder" in line or "audio_encoder" in line for line in problems)
    assert "Traceback" not in result.stderr


def test_a_wrong_model_or_folder_is_one_line(tmp_path):
    result = run_cli("weights", "check", str(tmp_path / "nowhere"), "model=infinitetalk")
    assert result.returncode == 2 and "is not a folder" in result.stderr and "Traceback" not in result.stderr
