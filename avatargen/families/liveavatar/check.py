"""``avatargen weights check DIR model=liveavatar``: a downloaded ``ckpt/`` folder (Wan2.2-S2V-14B and LiveAvatar)
against the models the config builds, from the file headers alone; the LoRA's pairs are read (they are small) and
each must fit a DiT weight. The report is the Wan family's (``WeightsCheck``)."""

from __future__ import annotations

from pathlib import Path

from safetensors.torch import load_file

from avatargen.config.schema import Config
from avatargen.families.liveavatar.build import SPECS, _wav2vec2_config
from avatargen.families.liveavatar.config import LiveAvatarConfig
from avatargen.families.liveavatar.models.dit import LiveAvatarDiT
from avatargen.families.liveavatar.models.lora import parse_peft
from avatargen.families.wan.check import (ModuleCheck, WeightsCheck, _stored, compare, config_problems, meta_shapes,
                                          tokenizer_problems, with_wav2vec2_names)  # fmt: skip
from avatargen.families.wan.models.umt5 import UMT5Encoder
from avatargen.families.wan.models.vae import WanVAE


def _module(root: Path, name: str, patterns: list[str], shapes: dict[str, tuple[int, ...]] | None,
            rename: bool = False) -> ModuleCheck:  # fmt: skip
    stored = _stored(root, patterns)
    if rename:
        stored = with_wav2vec2_names(stored)
    return compare(name, stored, shapes)


def check_liveavatar_weights(config: Config, root: Path) -> WeightsCheck:
    """The whole check of ``root`` for the LiveAvatar model ``config`` describes."""
    model = config.model
    assert isinstance(model, LiveAvatarConfig)
    la = model.liveavatar
    spec = SPECS[la.spec]
    from avatargen.families.wan.models.wav2vec2 import Wav2Vec2Encoder

    dit_shapes = meta_shapes(lambda: LiveAvatarDiT(spec.dit))
    audio_config = config_problems(root, f"{la.wav2vec2}/config.json")  # a render refuses it; the check goes on
    # wav2vec2's shapes come from that config.json: when it cannot be read, its files are listed, not compared
    audio = None if audio_config else meta_shapes(lambda: Wav2Vec2Encoder(_wav2vec2_config(spec, root, la)))
    audio_check = _module(root, "audio_encoder", [f"{la.wav2vec2}/model.safetensors"], audio, rename=True)
    audio_check.unreadable += audio_config
    modules = [
        audio_check,
        _module(root, "text_encoder", [la.text_encoder], meta_shapes(lambda: UMT5Encoder(spec.text_encoder))),
        _module(root, "vae", [la.vae], meta_shapes(lambda: WanVAE(spec.vae))),
        _module(root, "dit", list(la.dit), dit_shapes),
    ]
    other = tokenizer_problems(root, la.tokenizer)
    if la.lora is not None:
        path = root / la.lora
        if not path.is_file():
            other.append(f"lora: missing file {la.lora}")
        else:
            pairs, replaced = parse_peft(load_file(str(path)))
            for name, (a, b) in pairs.items():
                if name not in dit_shapes:
                    other.append(f"lora: {la.lora} targets {name}, which the DiT lacks")
                elif (b.shape[0], a.shape[1]) != dit_shapes[name]:
                    other.append(f"lora: {name} is {(b.shape[0], a.shape[1])} in {la.lora}, the DiT has {dit_shapes[name]}")
            other += [f"lora: {la.lora} holds {name}, which the DiT lacks" for name in replaced if name not in dit_shapes]
    return WeightsCheck(str(root), modules, other)
