"""A weights/ folder in InfiniteTalk's download layout holding the ``wan_tiny`` family's five models (seeded)."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file

from avatargen.families.wan.config import WAN_DIR
from avatargen.families.wan.models import CLIPVisionTower, UMT5Encoder, WanDiT, WanVAE
from avatargen.families.wan.models.specs import family_spec
from avatargen.families.wan.models.wav2vec2 import Wav2Vec2Encoder, wav2vec2_config

ADAPTER_PARTS = ("audio_proj.", ".audio_cross_attn.", ".norm_x.")


def write_wan_tiny_folder(root: Path) -> Path:
    """The folder with the files and tensor names users download: seven bf16 DiT shards, the adapter file, the VAE,
    umT5 and CLIP pickles, and a wav2vec2 pre-training folder (``wav2vec2.`` prefix, old weight-norm names)."""
    spec = family_spec("wan_tiny")
    torch.manual_seed(0)
    dit = {k: v.to(torch.bfloat16).contiguous() for k, v in WanDiT(spec.dit).state_dict().items()}
    adapter = {k: v for k, v in dit.items() if any(part in k for part in ADAPTER_PARTS)}
    backbone = sorted(set(dit) - set(adapter))
    wan = root / WAN_DIR
    wan.mkdir(parents=True)
    for shard in range(7):
        save_file({k: dit[k] for k in backbone[shard::7]}, wan / f"diffusion_pytorch_model-{shard + 1:05d}-of-00007.safetensors")
    (root / "InfiniteTalk/single").mkdir(parents=True)
    save_file(adapter, root / "InfiniteTalk/single/infinitetalk.safetensors")
    torch.save(WanVAE(spec.vae).state_dict(), wan / "Wan2.1_VAE.pth")
    torch.save({k: v.to(torch.bfloat16) for k, v in UMT5Encoder(spec.text_encoder).state_dict().items()},
               wan / "models_t5_umt5-xxl-enc-bf16.pth")  # fmt: skip
    clip = {f"visual.{k}": v.half() for k, v in CLIPVisionTower(spec.image_encoder).state_dict().items()}
    clip["textual.token_embedding.weight"] = torch.zeros(4, 4)  # the unused text tower
    torch.save(clip, wan / "models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth")
    audio = root / "chinese-wav2vec2-base"
    audio.mkdir()
    config = wav2vec2_config(spec, None)
    config.to_json_file(str(audio / "config.json"))
    state = {}
    for k, v in Wav2Vec2Encoder(config).state_dict().items():
        k = k.replace("parametrizations.weight.original0", "weight_g").replace("parametrizations.weight.original1", "weight_v")
        state[f"wav2vec2.{k}"] = v.contiguous()
    state["quantizer.codevectors"] = torch.zeros(1, 4, 2)  # pre-training heads: not the encoder
    save_file(state, audio / "model.safetensors")
    return root
