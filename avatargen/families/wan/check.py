"""``avatargen weights check``: a downloaded Wan-family weights folder against the models a config builds, from the
file headers alone (safetensors headers; ``.pth`` pickles memory-mapped, weights only), before any GPU work.

For each of the five models: the files its config keys name, the tensors missing, unexpected or mis-shaped against
the model built on the meta device, the stored dtypes, and the parameter count and bytes. Plus the tokenizer folder
and every LoRA file (each update must fit a DiT weight). Where a render refuses a folder, the check reports the same
problem by the same rule: a tensor stored in two files (``stored_once``), a folder with no tokenizer
(``open_tokenizer_folder``), a ``config.json`` that is not JSON (``folder_config``).
"""

from __future__ import annotations

import errno
import fnmatch
import glob
import json
import math
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import nn

from avatargen.config.schema import Config
from avatargen.errors import CheckpointError, first_line
from avatargen.families.wan.models.checkpoints import TensorSpec, read_tensor_specs
from avatargen.families.wan.models.lora import check_targets, parse_lora
from avatargen.families.wan.build import wan_parts
from avatargen.runtime.placement import build_on_meta
from avatargen.runtime.tensor_source import load_pth, stored_once
from avatargen.families.wan.sources import WAV2VEC2_WEIGHTS, folder_config, wav2vec2_names
from avatargen.families.wan.stages.text import open_tokenizer_folder

BYTES_PER_ELEMENT = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
                     "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "uint8": 1, "bool": 1}  # fmt: skip


@dataclass
class ModuleCheck:
    """One model's files against its meta build."""

    module: str
    files: list[str] = field(default_factory=list)  # the files found
    missing_files: list[str] = field(default_factory=list)
    missing_shards: dict[str, int] = field(default_factory=dict)  # a shard its index names, absent -> its tensors
    unreadable: list[str] = field(default_factory=list)  # why a file found cannot be read (one line each)
    stored_twice: list[str] = field(default_factory=list)  # a tensor in two files, which a render refuses (one line)
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    mis_shaped: dict[str, list[list[int]]] = field(default_factory=dict)  # name -> [stored shape, model shape]
    dtypes: dict[str, int] = field(default_factory=dict)  # stored dtype -> tensor count
    parameters: int = 0  # elements the model holds
    stored_bytes: int = 0  # bytes of its tensors as stored

    def problems(self) -> list[str]:
        """One line per problem, naming the module and the file or tensor."""
        lines = [f"{self.module}: missing file {f}" for f in self.missing_files]
        lines += [f"{self.module}: missing file {f} (a shard: its index names {count} tensors in it)"
                  for f, count in self.missing_shards.items()]  # fmt: skip
        lines += [f"{self.module}: {why}" for why in self.unreadable + self.stored_twice]
        lines += [f"{self.module}: missing tensor {name}" for name in self.missing]
        lines += [f"{self.module}: unexpected tensor {name}" for name in self.unexpected]
        lines += [f"{self.module}: tensor {name} is {tuple(stored)} in the file, the model has {tuple(model)}"
                  for name, (stored, model) in self.mis_shaped.items()]  # fmt: skip
        return lines


@dataclass
class WeightsCheck:
    """Every module's check, and the problems outside them (tokenizer, LoRA files)."""

    root: str
    modules: list[ModuleCheck]
    other_problems: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        return [line for m in self.modules for line in m.problems()] + self.other_problems

    @property
    def ok(self) -> bool:
        return not self.problems()

    def to_json(self) -> dict:
        return {"root": self.root, "ok": self.ok, "problems": self.problems(), "modules": [asdict(m) for m in self.modules]}


def file_specs(path: Path, shown: str) -> dict[str, TensorSpec]:
    """The tensors of one weights file, from its header (safetensors) or its memory-mapped pickle (``.pth``, weights
    only); ``CheckpointError`` with one line naming ``shown`` (the file as the report names it) and what to do when
    the file cannot be read: truncated, a header too large or not UTF-8, shapes its data does not cover, a symbolic
    link loop, a legacy or non-weights pickle."""
    try:
        os.stat(path)
    except OSError as err:
        what = "a symbolic link loop" if err.errno == errno.ELOOP else f"unreadable ({err.strerror})"
        raise CheckpointError(f"file {shown} is {what}; put the downloaded file there") from None
    if path.suffix in (".pth", ".pt"):
        try:
            tensors = load_pth(path)
        except CheckpointError as error:
            raise CheckpointError(str(error).replace(f"checkpoint file '{path}'", f"file {shown}")) from None
        return {name: TensorSpec(tuple(t.shape), str(t.dtype).removeprefix("torch."), path.name) for name, t in tensors.items()}
    try:
        return read_tensor_specs(path)
    except (SafetensorError, OSError, ValueError) as error:
        reason = first_line(error)
        raise CheckpointError(f"file {shown} cannot be read ({reason}); download it again") from None


@dataclass
class StoredFiles:
    """What one module's files hold, from their headers, and what is wrong with them."""

    tensors: dict[str, TensorSpec] = field(default_factory=dict)  # under the module's prefix, named without it
    found: list[str] = field(default_factory=list)  # the files, as the report shows them
    missing: list[str] = field(default_factory=list)  # patterns matching no file (and no shard of an index)
    missing_shards: dict[str, int] = field(default_factory=dict)  # a shard an index names, absent -> its tensors
    in_missing_shards: set[str] = field(default_factory=set)  # their tensors: that line says them, not one line each
    unreadable: list[str] = field(default_factory=list)
    stored_twice: list[str] = field(default_factory=list)


def _shown(root: Path, path: str) -> str:
    # a key may name a file outside the folder (an absolute path, ../): shown as given then
    return os.path.relpath(path, root) if Path(path).is_relative_to(root) else str(path)


def _indexed_shards(root: Path, pattern: str) -> dict[str, list[str]]:
    """The files that a safetensors index beside ``pattern``'s files names and ``pattern`` covers -> the tensors the
    index puts in each. An index that cannot be read is skipped: no render reads it (the pattern names the files)."""
    shards: dict[str, list[str]] = {}
    for index in sorted(glob.glob(str(root / Path(pattern).parent / "*.safetensors.index.json"))):
        try:
            weight_map = json.loads(Path(index).read_text())["weight_map"]
            weight_map = [(str(name), str(file)) for name, file in weight_map.items()]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        for name, file in weight_map:
            path = os.path.join(os.path.dirname(index), file)
            if fnmatch.fnmatchcase(path, str(root / pattern)):
                shards.setdefault(path, []).append(name)
    return shards


def _stored(root: Path, patterns: list[str], prefix: str = "") -> StoredFiles:
    """The tensors of the files ``patterns`` name under ``root``, those under ``prefix`` named without it."""
    stored = StoredFiles()
    names_by_file: list[tuple[str, list[str]]] = []
    for pattern in patterns:
        paths = sorted(glob.glob(str(root / pattern)))
        absent = {path: names for path, names in _indexed_shards(root, pattern).items() if path not in paths}
        for path, names in absent.items():  # one line for the shard, not one per tensor it holds
            stored.missing_shards[_shown(root, path)] = len(names)
            stored.in_missing_shards.update(name[len(prefix) :] for name in names if name.startswith(prefix))
        if not paths and not absent:
            stored.missing.append(pattern)
        for path in paths:
            shown = _shown(root, path)
            stored.found.append(shown)
            if not Path(path).is_file():  # a FIFO, a device, a folder: never opened (a FIFO would block for ever)
                stored.unreadable.append(f"file {shown} is not a regular file; give the downloaded weights file")
                continue
            try:
                specs = file_specs(Path(path), shown)
            except CheckpointError as error:
                stored.unreadable.append(str(error))
                continue
            names_by_file.append((shown, list(specs)))
            for name, spec in specs.items():
                if name.startswith(prefix):
                    stored.tensors[name[len(prefix) :]] = spec
    try:
        stored_once(names_by_file)  # the rule a render loads the files by
    except CheckpointError as error:
        stored.stored_twice.append(str(error))
    return stored


def _stored_for(root: Path, module: str, config: Config) -> StoredFiles:
    wan = config.model.wan
    if module == "dit":
        return _stored(root, list(wan.dit))
    if module == "image_encoder":
        return _stored(root, [wan.image_encoder], wan.image_encoder_prefix)
    if module == "audio_encoder":
        stored = _stored(root, [f"{wan.wav2vec2}/{WAV2VEC2_WEIGHTS}"])
        if not (root / wan.wav2vec2 / "config.json").is_file():
            stored.missing.append(f"{wan.wav2vec2}/config.json")
        return with_wav2vec2_names(stored)
    return _stored(root, [getattr(wan, module)])


def meta_shapes(build: Callable[[], nn.Module]) -> dict[str, tuple[int, ...]]:
    """Each tensor's shape in the model ``build`` makes, built on the meta device (no memory, no data)."""
    return {name: tuple(t.shape) for name, t in build_on_meta(build).state_dict().items()}


def with_wav2vec2_names(stored: StoredFiles) -> StoredFiles:
    """A wav2vec2 folder's tensors under transformers' current names (``wav2vec2_names``)."""
    names = wav2vec2_names(list(stored.tensors))
    return replace(stored, tensors={ours: stored.tensors[name] for ours, name in names.items()})


def compare(module: str, stored: StoredFiles, model_shapes: dict[str, tuple[int, ...]] | None) -> ModuleCheck:
    """One module's stored tensors against the shapes of its meta build (None: its shapes are not known, because its
    configuration could not be read; the files are listed and counted, not compared)."""
    check = ModuleCheck(module, files=stored.found, missing_files=stored.missing, missing_shards=stored.missing_shards,
                        unreadable=stored.unreadable, stored_twice=stored.stored_twice)  # fmt: skip
    for spec in stored.tensors.values():
        check.dtypes[spec.dtype] = check.dtypes.get(spec.dtype, 0) + 1
        check.stored_bytes += math.prod(spec.shape) * BYTES_PER_ELEMENT.get(spec.dtype, 4)
    if model_shapes is None:
        return check
    # an unreadable file's tensors are not missing; nor are those of no file at all (its line says so), nor a missing
    # shard's (its line says how many)
    if stored.found and not stored.unreadable:
        check.missing = sorted(set(model_shapes) - set(stored.tensors) - stored.in_missing_shards)
    check.unexpected = sorted(set(stored.tensors) - set(model_shapes))
    check.mis_shaped = {name: [list(stored.tensors[name].shape), list(shape)] for name, shape in model_shapes.items()
                        if name in stored.tensors and tuple(stored.tensors[name].shape) != tuple(shape)}  # fmt: skip
    check.parameters = sum(math.prod(shape) for shape in model_shapes.values())
    return check


def check_module(root: Path, config: Config, module: str,
                 model_shapes: dict[str, tuple[int, ...]] | None) -> ModuleCheck:  # fmt: skip
    """One module's files under ``root`` against the shapes of its meta build."""
    return compare(module, _stored_for(root, module, config), model_shapes)


def config_problems(root: Path, relative: str) -> list[str]:
    """A transformers ``config.json`` under ``root``, read as a render reads it (``folder_config``): one line if it
    cannot be (an absent one is the module's missing file, or the base configuration)."""
    try:
        folder_config(root / relative, f"file {relative}")
    except CheckpointError as error:
        return [str(error)]
    return []


def tokenizer_problems(root: Path, relative: str | None) -> list[str]:
    """The tokenizer folder (``None``: the byte-level stand-in, nothing to check), opened as a render opens it."""
    if relative is None:
        return []
    if not (root / relative).is_dir():
        return [f"tokenizer: missing folder {relative}"]
    try:
        open_tokenizer_folder(root / relative, f"tokenizer: folder {relative}")
    except CheckpointError as error:
        return [str(error)]
    return []


def check_wan_weights(config: Config, root: Path) -> WeightsCheck:
    """The whole check of ``root`` for the Wan model ``config`` describes (no tensor data is read, except the
    LoRA files' low-rank pairs, which are small)."""
    wan = config.model.wan
    audio_config = config_problems(root, f"{wan.wav2vec2}/config.json")
    modules = []
    dit_shapes: dict[str, tuple[int, ...]] = {}
    # wav2vec2's shapes come from its config.json: when it cannot be read, the parts are made without reading it
    # (root None) and wav2vec2's files are listed, not compared; the other parts are the same either way
    for part in wan_parts(config, None if audio_config else root):
        unknown = part.name == "audio_encoder" and bool(audio_config)
        shapes = None if unknown else meta_shapes(part.build)
        if part.name == "dit":
            dit_shapes = shapes or {}
        check = check_module(root, config, part.name, shapes)
        if part.name == "audio_encoder":
            check.unreadable += audio_config
        modules.append(check)
    other = tokenizer_problems(root, wan.tokenizer)
    for file in wan.lora:
        path = Path(file).expanduser()
        if not path.is_file():
            other.append(f"lora: missing file {file}")
            continue
        try:
            tensors = load_file(str(path))
        except (SafetensorError, OSError) as error:
            other.append(f"lora: {file} could not be read as safetensors ({error}); re-copy it")
            continue
        try:
            check_targets(parse_lora(tensors), dit_shapes)
        except ValueError as error:
            other.append(f"lora: {file} does not fit the DiT ({error})")
    return WeightsCheck(str(root), modules, other)
