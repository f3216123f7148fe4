"""Checking a downloaded weights folder against the models: every missing file and tensor, every wrong shape, from
the file headers alone (tiny models written in the original layout)."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file

from avatargen.families.wan.models import CLIPVisionTower, WanDiT, WanVAE, clip_params, dit_params, vae_params
from avatargen.families.wan.models.checkpoints import INFINITETALK_FILES, WAN_I2V_DIR, check_checkpoint, read_tensor_specs


def write_infinitetalk_folder(root: Path) -> None:
    """A weights/ folder as InfiniteTalk's README downloads it, with tiny models' tensors in bf16."""
    torch.manual_seed(0)
    dit = {k: v.to(torch.bfloat16) for k, v in WanDiT(dit_params("wan_tiny")).state_dict().items()}
    adapter_parts = ("audio_proj.", ".audio_cross_attn.", ".norm_x.")
    adapter = {k: v for k, v in dit.items() if any(part in k for part in adapter_parts)}
    backbone = sorted(set(dit) - set(adapter))
    wan = root / WAN_I2V_DIR
    wan.mkdir(parents=True)
    for shard in range(7):  # the backbone spread over the seven shards
        names = backbone[shard::7]
        shard_file = wan / f"diffusion_pytorch_model-{shard + 1:05d}-of-00007.safetensors"
        save_file({k: dit[k].contiguous() for k in names}, shard_file)
    (root / "InfiniteTalk/single").mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in adapter.items()}, root / "InfiniteTalk/single/infinitetalk.safetensors")
    torch.save(WanVAE(vae_params("wan_tiny")).state_dict(), wan / "Wan2.1_VAE.pth")
    clip = {f"visual.{k}": v for k, v in CLIPVisionTower(clip_params("clip_tiny")).state_dict().items()}
    clip |= {"textual.token_embedding.weight": torch.zeros(4, 4), "log_scale": torch.tensor(2.6)}
    torch.save(clip, wan / "models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth")


def meta(build):
    with torch.device("meta"):
        return build()


def test_a_complete_folder_checks_clean(tmp_path: Path) -> None:
    write_infinitetalk_folder(tmp_path)
    dit = check_checkpoint(meta(lambda: WanDiT(dit_params("wan_tiny"))), tmp_path, INFINITETALK_FILES["dit"])
    assert dit.ok, dit
    assert dit.dtypes == {"BF16": len(WanDiT(dit_params("wan_tiny")).state_dict())}
    vae = check_checkpoint(meta(lambda: WanVAE(vae_params("wan_tiny"))), tmp_path, INFINITETALK_FILES["vae"])
    assert vae.ok, vae
    tower = meta(lambda: CLIPVisionTower(clip_params("clip_tiny")))
    clip = check_checkpoint(tower, tmp_path, INFINITETALK_FILES["image_encoder"])
    assert clip.ok, clip  # the text tower and log_scale are outside visual.* and do not count


def test_problems_are_named(tmp_path: Path) -> None:
    write_infinitetalk_folder(tmp_path)
    (tmp_path / "InfiniteTalk/single/infinitetalk.safetensors").unlink()  # adapter not downloaded
    model = meta(lambda: WanDiT(dit_params("wan_tiny")))
    report = check_checkpoint(model, tmp_path, INFINITETALK_FILES["dit"])
    assert report.missing_files == ["InfiniteTalk/single/infinitetalk.safetensors"]
    assert "audio_proj.proj1.weight" in report.missing and "blocks.1.audio_cross_attn.proj.bias" in report.missing
    # a 1.3B-shaped model against 14B-shaped files: every mismatch with both shapes
    wider = meta(lambda: WanDiT(dit_params("wan_tiny", ffn_dim=96, audio=None)))
    report = check_checkpoint(wider, tmp_path, INFINITETALK_FILES["dit"])
    assert report.mis_shaped["blocks.0.ffn.0.weight"] == ((128, 64), (96, 64))
    assert not report.ok


def test_pth_shapes_and_dtypes_are_read(tmp_path: Path) -> None:
    path = tmp_path / "big.pth"
    torch.save({"w": torch.zeros(256, 1024)}, path)
    specs = read_tensor_specs(path)
    assert specs["w"].shape == (256, 1024) and specs["w"].dtype == "float32"


def test_meta_built_models_load_the_downloaded_files_strictly(tmp_path: Path) -> None:
    """The shards + adapter file and the VAE pickle assign-load into meta builds and run as the originals."""
    import glob

    from safetensors.torch import load_file

    write_infinitetalk_folder(tmp_path)
    torch.manual_seed(0)
    source = WanDiT(dit_params("wan_tiny")).to(torch.bfloat16).eval()  # the weights the folder holds
    state = {}
    for pattern in INFINITETALK_FILES["dit"].patterns:
        for path in sorted(glob.glob(str(tmp_path / pattern))):
            state |= load_file(path)
    loaded = meta(lambda: WanDiT(dit_params("wan_tiny")))
    loaded.load_state_dict(state, strict=True, assign=True)
    inputs = (torch.randn(1, 36, 3, 4, 4), torch.tensor([300.0]), torch.randn(1, 5, 32), torch.randn(1, 257, 1280))
    audio = torch.randn(1, 9, 5, 2, 16)
    with torch.no_grad():
        assert torch.equal(loaded.eval()(*inputs, audio), source(*inputs, audio))

    vae_state = torch.load(tmp_path / WAN_I2V_DIR / "Wan2.1_VAE.pth", mmap=True, weights_only=True)
    vae = meta(lambda: WanVAE(vae_params("wan_tiny")))
    vae.load_state_dict(vae_state, strict=True, assign=True)
    with torch.no_grad():
        frames, _ = vae.eval().decode(torch.randn(1, 16, 2, 2, 2))
    assert frames.shape == (1, 3, 5, 16, 16) and torch.isfinite(frames).all()
