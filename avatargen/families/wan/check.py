"""``avatargen weights check``: a downloaded Wan-family weights folder against the models a config builds, from the
file headers alone (safetensors headers; ``.pth`` pickles memory-mapped, weights only), before any GPU work.

For each of the five models: the files its config keys name, the tensors missing, unexpected or mis-shaped against
the model built on the meta device, the stored dtypes, and the parameter count and bytes. Plus the tokenizer folder
and every LoRA file (each update must fit a DiT weight).
"""

from __future__ import annotations

import errno
import glob
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from safetensors import SafetensorError
from safetensors.torch import load_file

from avatargen.config.schema import Config
from avatargen.errors import CheckpointError
from avatargen.families.wan.models.checkpoints import TensorSpec, read_tensor_specs
from avatargen.families.wan.models.lora import check_targets, parse_lora
from avatargen.families.wan.build import wan_parts
from avatargen.runtime.placement import build_on_meta
from avatargen.runtime.tensor_source import load_pth
from avatargen.families.wan.sources import WAV2VEC2_WEIGHTS, wav2vec2_names

BYTES_PER_ELEMENT = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
                     "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "uint8": 1, "bool": 1}  # fmt: skip


@dataclass
class ModuleCheck:
    """One model's files against its meta build."""

    module: str
    files: list[str] = field(default_factory=list)  # the files found
    missing_files: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)  # why a file found cannot be read (one line each)
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    mis_shaped: dict[str, list[list[int]]] = field(default_factory=dict)  # name -> [stored shape, model shape]
    dtypes: dict[str, int] = field(default_factory=dict)  # stored dtype -> tensor count
    parameters: int = 0  # elements the model holds
    stored_bytes: int = 0  # bytes of its tensors as stored

    def problems(self) -> list[str]:
        """One line per problem, naming the module and the file or tensor."""
        lines = [f"{self.module}: missing file {f}" for f in self.missing_files]
        lines += [f"{self.module}: {why}" for why in self.unreadable]
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
        reason = (str(error).splitlines() or [error.__class__.__name__])[0]
        raise CheckpointError(f"file {shown} cannot be read ({reason}); download it again") from None


def _stored(root: Path, patterns: list[str], prefix: str = "") -> tuple[dict[str, TensorSpec], list[str], list[str], list[str]]:
    """(tensors under ``prefix`` named without it, files found, patterns matching no file, why files cannot be read)."""
    tensors: dict[str, TensorSpec] = {}
    found, missing, unreadable = [], [], []
    for pattern in patterns:
        paths = sorted(glob.glob(str(root / pattern)))
        if not paths:
            missing.append(pattern)
        for path in paths:
            # a key may name a file outside the folder (an absolute path, ../): shown as given then
            shown = os.path.relpath(path, root) if Path(path).is_relative_to(root) else str(path)
            found.append(shown)
            if not Path(path).is_file():  # a FIFO, a device, a folder: never opened (a FIFO would block for ever)
                unreadable.append(f"file {shown} is not a regular file; give the downloaded weights file")
                continue
            try:
                specs = file_specs(Path(path), shown)
            except CheckpointError as error:
                unreadable.append(str(error))
                continue
            for name, spec in specs.items():
                if name.startswith(prefix):
                    tensors[name[len(prefix) :]] = spec
    return tensors, found, missing, unreadable


def _stored_for(root: Path, module: str, config: Config) -> tuple[dict[str, TensorSpec], list[str], list[str], list[str]]:
    wan = config.model.wan
    if module == "dit":
        return _stored(root, list(wan.dit))
    if module == "image_encoder":
        return _stored(root, [wan.image_encoder], wan.image_encoder_prefix)
    if module == "audio_encoder":
        stored, found, missing, unreadable = _stored(root, [f"{wan.wav2vec2}/{WAV2VEC2_WEIGHTS}"])
        if not (root / wan.wav2vec2 / "config.json").is_file():
            missing.append(f"{wan.wav2vec2}/config.json")
        return {ours: stored[name] for ours, name in wav2vec2_names(list(stored)).items()}, found, missing, unreadable
    return _stored(root, [getattr(wan, module)])


def check_module(root: Path, config: Config, module: str, model_shapes: dict[str, tuple[int, ...]]) -> ModuleCheck:
    """One module's files under ``root`` against the shapes of its meta build."""
    stored, found, missing_files, unreadable = _stored_for(root, module, config)
    check = ModuleCheck(module, files=found, missing_files=missing_files, unreadable=unreadable)
    check.missing = [] if unreadable else sorted(set(model_shapes) - set(stored))  # an unreadable file's tensors are not missing
    check.unexpected = sorted(set(stored) - set(model_shapes))
    check.mis_shaped = {name: [list(stored[name].shape), list(shape)] for name, shape in model_shapes.items()
                        if name in stored and tuple(stored[name].shape) != tuple(shape)}  # fmt: skip
    for spec in stored.values():
        check.dtypes[spec.dtype] = check.dtypes.get(spec.dtype, 0) + 1
        check.stored_bytes += math.prod(spec.shape) * BYTES_PER_ELEMENT.get(spec.dtype, 4)
    check.parameters = sum(math.prod(shape) for shape in model_shapes.values())
    return check


def check_wan_weights(config: Config, root: Path) -> WeightsCheck:
    """The whole check of ``root`` for the Wan model ``config`` describes (no tensor data is read, except the
    LoRA files' low-rank pairs, which are small)."""
    wan = config.model.wan
    modules = []
    dit_shapes: dict[str, tuple[int, ...]] = {}
    for part in wan_parts(config, root):
        model = build_on_meta(part.build)
        shapes = {name: tuple(t.shape) for name, t in model.state_dict().items()}
        if part.name == "dit":
            dit_shapes = shapes
        modules.append(check_module(root, config, part.name, shapes))
    other = []
    if wan.tokenizer is not None and not (root / wan.tokenizer).is_dir():
        other.append(f"tokenizer: missing folder {wan.tokenizer}")
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
