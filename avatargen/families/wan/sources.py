"""Tensor sources for the Wan-family files as their users download them (``model.wan.*`` paths under ``model.checkpoint``).

Each source only maps files and names: the placement pass reads one tensor at a time from it. The DiT is the Wan
shards plus the audio adapter file, merged by name; LoRA files are merged into each weight as it is read (so no
merged copy of the model exists anywhere); wav2vec2's folder is renamed to transformers' current names.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import Tensor

from avatargen.errors import CheckpointError
from avatargen.families.wan.config import WanModelConfig
from avatargen.families.wan.models.lora import LoraDelta, check_targets, merge_into, parse_lora
from avatargen.runtime.tensor_source import RenamedSource, TensorSource, files_of, safetensors_files

WAV2VEC2_WEIGHTS = "model.safetensors"


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
            tensors = load_file(str(path))  # LoRAs are small (low-rank pairs)
        except (SafetensorError, OSError) as error:
            raise CheckpointError(f"model.wan.lora: '{path}' could not be read as safetensors ({error}); give the "
                                  "LoRA's .safetensors file, re-copied if it is damaged") from error  # fmt: skip
        try:
            deltas.update(parse_lora(tensors))
            check_targets(deltas, source.shapes())
        except ValueError as error:
            raise CheckpointError(f"model.wan.lora: '{path}' does not fit this DiT ({str(error)[:300]})") from error
    return LoraMergedSource(source, deltas, wan.lora_scale)


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


def folder_config(path: Path, shown: str) -> dict[str, Any] | None:
    """A transformers folder's ``config.json`` at ``path`` (None when it is absent), for a render and ``avatargen
    weights check`` alike; ``CheckpointError`` (one line, starting with ``shown``, the file as the caller names it)
    when it cannot be read or is not a JSON object."""
    if not path.is_file():
        return None
    try:
        data = path.read_bytes()
    except OSError as error:
        raise CheckpointError(f"{shown} cannot be read ({error.strerror or error}); re-download the folder") from error
    try:
        loaded = json.loads(data)
    except ValueError as error:  # not UTF-8, or not JSON
        raise CheckpointError(f"{shown} is not JSON ({error}); re-download the folder") from error
    if not isinstance(loaded, dict):
        raise CheckpointError(f"{shown} is not a JSON object (a model configuration); re-download the folder")
    return loaded


def wav2vec2_folder_config(root: Path, wan: WanModelConfig) -> dict[str, Any] | None:
    """The folder's ``config.json`` (None when it is absent: random weights use the base configuration)."""
    path = root / wan.wav2vec2 / "config.json"
    return folder_config(path, f"model.wan.wav2vec2: '{path}'")


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
