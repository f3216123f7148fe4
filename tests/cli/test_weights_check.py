"""`avatargen weights check DIR model=...`: a Wan weights folder checked from its file headers, one line per problem."""

from __future__ import annotations

import io
import json
import os
import shutil
import struct
import zipfile
from pathlib import Path

import pytest
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
    torch.save({"x": _RunsCode()}, root / WAN_DIR / "models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth")
    (tmp_path / "photo.safetensors").write_bytes(b"\x89PNG not a LoRA")  # was 'unexpected SafetensorError', exit 1
    loras = f"model.wan.lora=[{tmp_path / 'other.safetensors'},{tmp_path / 'photo.safetensors'}]"
    result = run_cli("weights", "check", str(root), "model=wan_tiny", loras, cwd=tmp_path)
    assert result.returncode == 2
    problems = [line for line in result.stderr.splitlines() if line.startswith("problem: ")]
    assert "problem: dit: missing file InfiniteTalk/single/infinitetalk.safetensors" in problems
    assert "problem: dit: missing tensor audio_proj.proj1.weight" in problems
    assert "problem: vae: tensor conv2.weight is (16, 16, 1, 1, 2) in the file, the model has (16, 16, 1, 1, 1)" in problems
    assert any(line.startswith("problem: lora: ") and "blocks.0.ffn.0.weight" in line for line in problems)
    assert any(line.startswith(f"problem: lora: {tmp_path / 'photo.safetensors'} could not be read as safetensors")
               for line in problems)  # fmt: skip
    assert not any("text_encoder" in line or "audio_encoder" in line for line in problems)
    clip = "problem: image_encoder: file Wan2.1-I2V-14B-480P/models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth is"
    assert [line for line in problems if "image_encoder" in line] == [f"{clip} not a weights-only .pth (it needs Python "
        "objects beyond tensors, which are never unpickled); save its state_dict() alone, or convert it to .safetensors"]  # fmt: skip
    assert "Traceback" not in result.stderr and "weights_only" not in result.stderr and not (tmp_path / "PWNED").exists()


def test_a_wrong_model_or_folder_is_one_line(tmp_path):
    result = run_cli("weights", "check", str(tmp_path / "nowhere"), "model=infinitetalk")
    assert result.returncode == 2 and "is not a folder" in result.stderr and "Traceback" not in result.stderr


# --- a broken file is one problem line naming it, never a traceback or torch's advice ----------------------------


def _shard(root: Path) -> Path:
    return sorted((root / WAN_DIR).glob("diffusion_pytorch_model-*"))[0]


def _rewrite_header(path: Path, change) -> None:
    data = path.read_bytes()
    length = struct.unpack("<Q", data[:8])[0]
    header = change(data[8 : 8 + length])
    path.write_bytes(struct.pack("<Q", len(header)) + header + data[8 + length :])


def _huge_tensor(header: bytes) -> bytes:
    entries = json.loads(header)
    entries[next(k for k in entries if k != "__metadata__")]["shape"] = [2**40]
    text = json.dumps(entries).encode()
    return text + b" " * (-len(text) % 8)


class _RunsCode:
    def __reduce__(self):
        return (os.system, ("touch PWNED",))


def _cut_a_storage(vae: Path) -> None:
    """The VAE pickle re-zipped with its largest tensor's bytes cut in half (the zip itself stays valid)."""
    original = vae.read_bytes()
    with zipfile.ZipFile(io.BytesIO(original)) as zin, zipfile.ZipFile(vae, "w", zipfile.ZIP_STORED) as zout:
        largest = max((n for n in zin.namelist() if "/data/" in n), key=lambda n: zin.getinfo(n).file_size)
        for name in zin.namelist():
            data = zin.read(name)
            zout.writestr(zin.getinfo(name), data[: len(data) // 2] if name == largest else data)


def _break(kind: str, root: Path) -> tuple[str, str]:
    """Break one file of the folder; (module, what its problem line says)."""
    shard, vae = _shard(root), root / WAN_DIR / "Wan2.1_VAE.pth"
    if kind == "truncated shard":
        shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
        return "dit", "incomplete metadata, file not fully covered"
    if kind == "2^63 header length":
        shard.write_bytes(struct.pack("<Q", 2**63) + shard.read_bytes()[8:])
        return "dit", "header too large"
    if kind == "non-UTF-8 header":
        _rewrite_header(shard, lambda header: header[:2] + b"\xff" + header[3:])
        return "dit", "invalid UTF-8 in header"
    if kind == "2^40-element tensor":
        _rewrite_header(shard, _huge_tensor)
        return "dit", "invalid shape, data type, or offset for tensor"
    if kind == "symlink loop":
        shard.unlink()
        shard.symlink_to(shard.name)
        return "dit", "is a symbolic link loop"
    if kind == "legacy pickle":
        torch.save(torch.load(vae, weights_only=True), vae, _use_new_zipfile_serialization=False)
        return "vae", "is a legacy (non-zip) torch pickle"
    if kind in ("random bytes .pth", "a web page as .pth"):  # was 'a legacy (non-zip) torch pickle'
        vae.write_bytes(os.urandom(4096) if kind == "random bytes .pth" else b"<html>404 Not Found</html>\n")
        return "vae", "is not a torch checkpoint (neither a zip nor a pickle that torch.save writes): damaged, or not"
    if kind == "malicious zip pickle":
        torch.save({"x": _RunsCode()}, vae)
        return "vae", "is not a weights-only .pth (it needs Python objects beyond tensors, which are never unpickled)"
    _cut_a_storage(vae)
    return "vae", "is truncated: tensor"


BROKEN = ["truncated shard", "2^63 header length", "non-UTF-8 header", "2^40-element tensor", "symlink loop",
          "legacy pickle", "random bytes .pth", "a web page as .pth", "malicious zip pickle",
          "truncated storage"]  # fmt: skip


@pytest.fixture(scope="module")
def clean_folder(tmp_path_factory) -> Path:
    return write_wan_tiny_folder(tmp_path_factory.mktemp("wan") / "weights")


def _broken_copy(clean: Path, kind: str, folder: Path) -> tuple[Path, str, str]:
    """A copy of the one file ``kind`` breaks (the shard or the VAE), broken; (file, its module, what its line says)."""
    root = folder / "weights"
    for original in (_shard(clean), clean / WAN_DIR / "Wan2.1_VAE.pth"):
        copy = root / original.relative_to(clean)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(original, copy)
    module, says = _break(kind, root)
    return (_shard(root) if module == "dit" else root / WAN_DIR / "Wan2.1_VAE.pth"), module, says


@pytest.mark.parametrize("kind", BROKEN)
def test_a_broken_weights_file_is_one_problem_naming_it(tmp_path, clean_folder, kind, monkeypatch):
    from avatargen.errors import CheckpointError
    from avatargen.families.wan.check import file_specs

    monkeypatch.chdir(tmp_path)  # where a pickle that runs code would leave PWNED
    path, _, says = _broken_copy(clean_folder, kind, tmp_path)
    with pytest.raises(CheckpointError) as error:
        file_specs(path, path.name)
    line = str(error.value)
    assert line.startswith(f"file {path.name} ") and says in line and "\n" not in line, line
    assert ("legacy" in line) == (kind == "legacy pickle"), line
    assert "weights_only=False" not in line and not (tmp_path / "PWNED").exists()


def test_a_broken_file_is_its_module_s_only_problem(tmp_path, clean_folder):
    from avatargen.config.loader import load_config, to_config
    from avatargen.families.wan.check import check_wan_weights

    root = Path(shutil.copytree(clean_folder, tmp_path / "weights"))
    _break("truncated storage", root)
    config = to_config(load_config(["model=wan_tiny", f"model.checkpoint={root}"]))
    problems = check_wan_weights(config, root).problems()
    assert len(problems) == 1 and problems[0].startswith("vae: file Wan2.1-I2V-14B-480P/Wan2.1_VAE.pth is truncated")


def test_a_render_refuses_a_pth_whose_storage_is_truncated(tmp_path, clean_folder):
    from avatargen.errors import CheckpointError
    from avatargen.runtime.tensor_source import load_pth

    vae = Path(shutil.copy(clean_folder / WAN_DIR / "Wan2.1_VAE.pth", tmp_path / "vae.pth"))
    assert load_pth(vae)  # the file as written
    _cut_a_storage(vae)
    with pytest.raises(CheckpointError, match="is truncated: tensor .* needs more bytes than the file stores"):
        load_pth(vae)


# --- what a render refuses, the check reports: one line each, and the check goes on ---------------------------------


def _problems(result) -> list[str]:
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    return [line for line in result.stderr.splitlines() if line.startswith("problem: ")]


@pytest.mark.parametrize("second", ["InfiniteTalk/multi/infinitetalk.safetensors", "extra.safetensors"])
def test_a_tensor_stored_in_two_dit_files_is_one_problem_as_a_render_refuses_it(tmp_path, clean_folder, second):
    """Both adapter files named (they hold the same names), or an adapter that also holds a base shard's tensor: a
    render refuses the folder (exit 2); the check passed it."""
    from avatargen.errors import CheckpointError
    from avatargen.runtime.tensor_source import safetensors_files

    root = Path(shutil.copytree(clean_folder, tmp_path / "weights"))
    adapter = root / "InfiniteTalk/single/infinitetalk.safetensors"
    (root / second).parent.mkdir(parents=True, exist_ok=True)
    if second == "extra.safetensors":
        save_file({"patch_embedding.bias": torch.zeros(64)}, root / second)
    else:
        shutil.copy(adapter, root / second)
    dit = [f"{WAN_DIR}/diffusion_pytorch_model-*-of-00007.safetensors", "InfiniteTalk/single/infinitetalk.safetensors",
           second]  # fmt: skip
    problems = _problems(run_cli("weights", "check", str(root), "model=wan_tiny", f"model.wan.dit=[{','.join(dit)}]"))
    assert len(problems) == 1 and problems[0].startswith("problem: dit: tensor '"), problems
    assert f"' and '{second}'" in problems[0] and problems[0].endswith("; remove one of the files"), problems
    paths = [path for pattern in dit for path in sorted(root.glob(pattern))]
    with pytest.raises(CheckpointError) as refused:  # the render's loader, by the same rule
        safetensors_files(paths, "dit")
    same_tensor = problems[0].removeprefix("problem: dit: ").split(" is in both ")[0]
    assert str(refused.value).startswith(f"{same_tensor} is in both "), refused.value


def _toy_tokenizer(folder: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel({"<pad>": 0, "</s>": 1, "<unk>": 2, "face": 3}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(folder)


@pytest.mark.parametrize("holds", ["nothing", "unrelated files", "a tokenizer"])
def test_a_tokenizer_folder_with_no_tokenizer_is_a_problem_as_a_render_refuses_it(tmp_path, clean_folder, holds):
    from avatargen.errors import CheckpointError
    from avatargen.families.wan.stages.text import FolderTokenizer

    root = Path(shutil.copytree(clean_folder, tmp_path / "weights"))
    folder = root / WAN_DIR / "google/umt5-xxl"
    folder.mkdir(parents=True)
    if holds == "unrelated files":
        (folder / "README.md").write_text("umT5")
        (folder / "config.json").write_text("{}")
    if holds == "a tokenizer":
        _toy_tokenizer(folder)
    result = run_cli("weights", "check", str(root), "model=wan_tiny", f"model.wan.tokenizer={WAN_DIR}/google/umt5-xxl")
    if holds == "a tokenizer":
        assert result.returncode == 0 and "problem" not in result.stderr, result.stderr
        return
    problems = _problems(result)
    assert problems == [f"problem: tokenizer: folder {WAN_DIR}/google/umt5-xxl is not a tokenizer folder "
                        "(transformers found no tokenizer.json, nor a slow tokenizer it can convert); download it with "
                        "the Wan folder (docs/models.md)"]  # fmt: skip
    with pytest.raises(CheckpointError, match="is not a tokenizer folder"):  # the render's test of the folder
        FolderTokenizer(folder, 8)


def test_a_missing_shard_named_by_the_index_is_one_line_with_its_tensor_count(tmp_path, clean_folder):
    from safetensors import safe_open

    root = Path(shutil.copytree(clean_folder, tmp_path / "weights"))
    weight_map = {}
    for shard in sorted((root / WAN_DIR).glob("diffusion_pytorch_model-*")):
        with safe_open(str(shard), "pt") as handle:
            weight_map.update({name: shard.name for name in handle.keys()})
    index = {"metadata": {"total_size": 0}, "weight_map": weight_map}
    (root / WAN_DIR / "diffusion_pytorch_model.safetensors.index.json").write_text(json.dumps(index))
    third = "diffusion_pytorch_model-00003-of-00007.safetensors"
    (root / WAN_DIR / third).unlink()
    held = sum(file == third for file in weight_map.values())
    problems = _problems(run_cli("weights", "check", str(root), "model=wan_tiny"))
    assert problems == [f"problem: dit: missing file {WAN_DIR}/{third} (a shard: its index names {held} tensors in it)"]


def test_a_wav2vec2_config_that_is_not_json_is_a_problem_and_the_check_goes_on(tmp_path, clean_folder):
    root = Path(shutil.copytree(clean_folder, tmp_path / "weights"))
    (root / "chinese-wav2vec2-base/config.json").write_text('{"hidden_size": 768,')  # a download cut short
    (root / WAN_DIR / "Wan2.1_VAE.pth").unlink()
    result = run_cli("weights", "check", str(root), "model=wan_tiny")
    problems = _problems(result)
    assert problems[0].startswith("problem: audio_encoder: file chinese-wav2vec2-base/config.json is not JSON (")
    assert problems[1:] == [f"problem: vae: missing file {WAN_DIR}/Wan2.1_VAE.pth"], problems
    assert not any(line.startswith("error: model.wan.wav2vec2") for line in result.stderr.splitlines())
