"""``avatargen weights check DIR model=liveavatar``: a downloaded ``ckpt/`` folder (Wan2.2-S2V-14B and LiveAvatar)
against the models the config builds, from the file headers alone; the LoRA's pairs are read (they are small) and
each must fit a DiT weight. The report is the Wan family's (``WeightsCheck``)."""

from __future__ import annotations

import math
from pathlib import Path

from safetensors.torch import load_file

from avatargen.config.schema import Config
from avatargen.families.liveavatar.build import SPECS, _wav2vec2_config
from avatargen.families.liveavatar.config import LiveAvatarConfig
from avatargen.families.liveavatar.models.dit import LiveAvatarDiT
from avatargen.families.liveavatar.models.lora import parse_peft
from avatargen.families.wan.check import BYTES_PER_ELEMENT, ModuleCheck, WeightsCheck, _stored
from avatargen.families.wan.models.umt5 import UMT5Encoder
from avatargen.families.wan.models.vae import WanVAE
from avatargen.families.wan.sources import wav2vec2_names
from avatargen.runtime.placement import build_on_meta


def _module(root: Path, name: str, patterns: list[str], shapes: dict[str, tuple[int, ...]], rename: bool = False) -> ModuleCheck:
    stored, found, missing_files, unreadable = _stored(root, patterns)
    if rename:
        stored = {ours: stored[theirs] for ours, theirs in wav2vec2_names(list(stored)).items()}
    check = ModuleCheck(name, files=found, missing_files=missing_files, unreadable=unreadable)
    check.missing = [] if unreadable or not found else sorted(set(shapes) - set(stored))  # no file: one line, not every tensor
    check.unexpected = sorted(set(stored) - set(shapes))
    check.mis_shaped = {k: [list(stored[k].shape), list(v)] for k, v in shapes.items() if k in stored and tuple(stored[k].shape) != tuple(v)}
    for spec in stored.values():
        check.dtypes[spec.dtype] = check.dtypes.get(spec.dtype, 0) + 1
        check.stored_bytes += math.prod(spec.shape) * BYTES_PER_ELEMENT.get(spec.dtype, 4)
    check.parameters = sum(math.prod(s) for s in shapes.values())
    return check


def check_liveavatar_weights(config: Config, root: Path) -> WeightsCheck:
    """The whole check of ``root`` for the LiveAvatar model ``config`` describes."""
    model = config.model
    assert isinstance(model, LiveAvatarConfig)
    la = model.liveavatar
    spec = SPECS[la.spec]
    from avatargen.families.wan.models.wav2vec2 import Wav2Vec2Encoder

    def shapes(build) -> dict[str, tuple[int, ...]]:
        return {k: tuple(t.shape) for k, t in build_on_meta(build).state_dict().items()}

    dit_shapes = shapes(lambda: LiveAvatarDiT(spec.dit))
    audio = _wav2vec2_config(spec, root, la)
    modules = [
        _module(root, "audio_encoder", [f"{la.wav2vec2}/model.safetensors"], shapes(lambda: Wav2Vec2Encoder(audio)), rename=True),
        _module(root, "text_encoder", [la.text_encoder], shapes(lambda: UMT5Encoder(spec.text_encoder))),
        _module(root, "vae", [la.vae], shapes(lambda: WanVAE(spec.vae))),
        _module(root, "dit", list(la.dit), dit_shapes),
    ]
    other = []
    if la.tokenizer is not None and not (root / la.tokenizer).is_dir():
        other.append(f"tokenizer: missing folder {la.tokenizer}")
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
