"""Tensor sources for the Wan-family files as their users download them (``model.wan.*`` paths under ``model.checkpoint``).

Each source only maps files and names: the placement pass reads one tensor at a time from it. The DiT is the Wan
shards plus the audio adapter file, merged by name; LoRA files are merged into each weight as it is read (so no
merged copy of the model exists anywhere); wav2vec2's folder is renamed to transformers' current names.
"""

from __future__ import annotations

import glob
import json
from pathlib import Path
from typing import Any

from safetensors.torch import load_file
from torch import Tensor

from avatargen.config.wan import WanModelConfig
from avatargen.errors import CheckpointError
from avatargen.models.wan.lora import LoraDelta, check_targets, merge_into, parse_lora
from avatargen.runtime.tensor_source import PthSource, SafetensorsSource, TensorSource, _file_keys

WAV2VEC2_WEIGHTS = "model.safetensors"


def files_of(root: Path, pattern: str, key: str) -> list[Path]:
    """The files ``pattern`` (a glob under ``root``) names; CheckpointError naming the config key if none."""
    paths = sorted(Path(p) for p in glob.glob(str(root / pattern)))
    if not paths:
        raise CheckpointError(
            f"{key}: no file matches '{root / pattern}'; download it (docs/models.md) or point {key} at it "
            f"(paths are relative to model.checkpoint={root})"
        )
    return paths


def safetensors_files(paths: list[Path], label: str) -> SafetensorsSource:
    """Several safetensors files as one source; a name stored twice is refused (the files would disagree)."""
    keys: dict[str, tuple[Path, str]] = {}
    for path in paths:
        for key in _file_keys(path):
            if key in keys:
                raise CheckpointError(f"tensor '{key}' is in both '{keys[key][0]}' and '{path}'; remove one of the files")
            keys[key] = (path, key)
    return SafetensorsSource(keys, label)


class LoraMergedSource:
    """A source whose weights come out with LoRA updates added (fp32 math, the stored dtype back)."""

    def __init__(self, base: TensorSource, deltas: dict[str, LoraDelta], scale: float):
        self.base, self.deltas, self.scale = base, deltas, scale
        self.label = f"{base.label} + LoRA"

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return self.base.shapes()

    def read(self, name: str, rows: slice | None = None) -> Tensor:
        if name not in self.deltas:
            return self.base.read(name, rows)
        merged = merge_into(name, self.base.read(name), self.deltas, self.scale)  # one tensor at a time
        return merged[rows] if rows is not None else merged


class RenamedSource:
    """Another source under other names: ``names`` maps each name this source offers to the base's name."""

    def __init__(self, base: TensorSource, names: dict[str, str]):
        self.base, self.names, self.label = base, names, base.label

    def shapes(self) -> dict[str, tuple[int, ...]]:
        shapes = self.base.shapes()
        return {name: shapes[stored] for name, stored in self.names.items()}

    def read(self, name: str, rows: slice | None = None) -> Tensor:
        return self.base.read(self.names[name], rows)


def dit_source(root: Path, wan: WanModelConfig) -> TensorSource:
    """The DiT: ``model.wan.dit`` files merged by name, then ``model.wan.lora`` merged into the weights."""
    paths = [path for pattern in wan.dit for path in files_of(root, pattern, "model.wan.dit")]
    source: TensorSource = safetensors_files(paths, " + ".join(wan.dit))
    if not wan.lora:
        return source
    deltas: dict[str, LoraDelta] = {}
    for file in wan.lora:
        path = Path(file).expanduser()
        if not path.is_file():
            raise CheckpointError(f"model.wan.lora: '{path}' does not exist; give the LoRA file's path")
        try:
            deltas.update(parse_lora(load_file(str(path))))  # LoRAs are small (low-rank pairs)
            check_targets(deltas, source.shapes())
        except ValueError as error:
            raise CheckpointError(f"model.wan.lora: '{path}' does not fit this DiT ({str(error)[:300]})") from error
    return LoraMergedSource(source, deltas, wan.lora_scale)


def pth_source(root: Path, relative: str, key: str, prefix: str = "") -> TensorSource:
    """One ``.pth`` pickle (memory-mapped, weights only), the tensors under ``prefix`` named without it."""
    path = root / relative
    if not path.is_file():
        raise CheckpointError(f"{key}: '{path}' does not exist; download it (docs/models.md) or point {key} at it")
    return PthSource(path, prefix)


def wav2vec2_names(stored: list[str]) -> dict[str, str]:
    """transformers' ``Wav2Vec2Model`` names -> a folder's stored names: a pre-training checkpoint's ``wav2vec2.``
    prefix dropped (its quantizer and projection heads are not the encoder), the old weight-norm names mapped."""
    prefixed = any(name.startswith("wav2vec2.") for name in stored)
    names = {}
    for name in stored:
        if prefixed and not name.startswith("wav2vec2."):
            continue
        ours = name.removeprefix("wav2vec2.") if prefixed else name
        ours = ours.replace("pos_conv_embed.conv.weight_g", "pos_conv_embed.conv.parametrizations.weight.original0")
        ours = ours.replace("pos_conv_embed.conv.weight_v", "pos_conv_embed.conv.parametrizations.weight.original1")
        names[ours] = name
    return names


def wav2vec2_folder_config(root: Path, wan: WanModelConfig) -> dict[str, Any] | None:
    """The folder's ``config.json`` (None when it is absent: random weights use the base configuration)."""
    path = root / wan.wav2vec2 / "config.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError as error:
        raise CheckpointError(f"model.wan.wav2vec2: '{path}' is not JSON ({error}); re-download the folder") from error


def wav2vec2_source(root: Path, wan: WanModelConfig) -> TensorSource:
    """The wav2vec2 encoder from its transformers folder (``model.safetensors``)."""
    path = root / wan.wav2vec2 / WAV2VEC2_WEIGHTS
    if not path.is_file():
        raise CheckpointError(
            f"model.wan.wav2vec2: '{path}' does not exist; download the folder with its model.safetensors "
            "(docs/models.md) or point model.wan.wav2vec2 at it"
        )
    base = safetensors_files([path], str(path))
    return RenamedSource(base, wav2vec2_names(list(base.shapes())))
