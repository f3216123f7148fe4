"""Where each Wan-family model's tensors are in a downloaded weights folder, and a check of them that reads no data.

The layout is InfiniteTalk's README download (``weights/`` holding ``Wan2.1-I2V-14B-480P/``,
``chinese-wav2vec2-base/`` and ``InfiniteTalk/``). :func:`check_checkpoint` compares the tensor names, shapes and
dtypes in the files (safetensors headers; ``.pth`` pickles opened with ``mmap=True, weights_only=True``, so no
tensor data is read) with a model built on the meta device, and lists every missing file, missing, unexpected and
mis-shaped tensor.
"""

from __future__ import annotations

import glob
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import safe_open
from torch import nn

WAN_I2V_DIR = "Wan2.1-I2V-14B-480P"


@dataclass(frozen=True)
class CheckpointFiles:
    """One model's tensor files, relative to the weights folder (glob patterns allowed), merged in order.

    ``prefix``: only the tensors under it belong to the model, named without it (CLIP: ``visual.``).
    """

    patterns: tuple[str, ...]
    prefix: str = ""


INFINITETALK_FILES: dict[str, CheckpointFiles] = {
    "dit": CheckpointFiles(
        (
            f"{WAN_I2V_DIR}/diffusion_pytorch_model-*-of-00007.safetensors",
            "InfiniteTalk/single/infinitetalk.safetensors",
        )
    ),
    "vae": CheckpointFiles((f"{WAN_I2V_DIR}/Wan2.1_VAE.pth",)),
    "text_encoder": CheckpointFiles((f"{WAN_I2V_DIR}/models_t5_umt5-xxl-enc-bf16.pth",)),
    "image_encoder": CheckpointFiles(
        (f"{WAN_I2V_DIR}/models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth",), prefix="visual."
    ),
}
# MultiTalk (its README: MeiGen-AI/MeiGen-MultiTalk into weights/MeiGen-MultiTalk): the same Wan folder, its adapter
# in place of InfiniteTalk's.
MULTITALK_FILES = dict(
    INFINITETALK_FILES,
    dit=CheckpointFiles(
        (f"{WAN_I2V_DIR}/diffusion_pytorch_model-*-of-00007.safetensors", "MeiGen-MultiTalk/multitalk.safetensors")
    ),
)


@dataclass(frozen=True)
class TensorSpec:
    """A tensor's shape and dtype as stored, and the file holding it."""

    shape: tuple[int, ...]
    dtype: str
    file: str


@dataclass
class CheckReport:
    """Everything wrong with one model's files; ``ok`` when nothing is."""

    missing_files: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    mis_shaped: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = field(default_factory=dict)  # (file, model)
    dtypes: dict[str, int] = field(default_factory=dict)  # stored dtype -> tensor count
    parameters: int = 0  # elements the model expects

    @property
    def ok(self) -> bool:
        return not (self.missing_files or self.missing or self.unexpected or self.mis_shaped)


def read_tensor_specs(path: Path) -> dict[str, TensorSpec]:
    """Names, shapes and dtypes of the tensors in a ``.safetensors`` or ``.pth`` file, without reading their data."""
    if path.suffix == ".safetensors":
        with safe_open(str(path), framework="pt") as f:
            return {
                name: TensorSpec(tuple(f.get_slice(name).get_shape()), f.get_slice(name).get_dtype(), path.name)
                for name in f.keys()
            }
    if path.suffix in (".pth", ".pt"):
        state = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
        if not isinstance(state, dict):
            raise ValueError(f"{path} does not hold a state dict (got {type(state).__name__})")
        return {
            name: TensorSpec(tuple(t.shape), str(t.dtype).removeprefix("torch."), path.name)
            for name, t in state.items()
            if isinstance(t, torch.Tensor)
        }
    raise ValueError(f"{path}: not a .safetensors or .pth file")


def stored_tensors(root: Path, files: CheckpointFiles) -> tuple[dict[str, TensorSpec], list[str]]:
    """All tensors of one model under ``root`` (prefix applied), and the patterns that matched no file."""
    tensors: dict[str, TensorSpec] = {}
    missing_files = []
    for pattern in files.patterns:
        paths = sorted(glob.glob(str(root / pattern)))
        if not paths:
            missing_files.append(pattern)
        for path in paths:
            for name, spec in read_tensor_specs(Path(path)).items():
                if name.startswith(files.prefix):
                    tensors[name[len(files.prefix) :]] = spec
    return tensors, missing_files


def check_checkpoint(model: nn.Module, root: Path, files: CheckpointFiles) -> CheckReport:
    """Compare a (meta-device) model's state dict with the tensors stored for it under ``root``."""
    stored, missing_files = stored_tensors(root, files)
    expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    report = CheckReport(missing_files=missing_files)
    report.missing = sorted(set(expected) - set(stored))
    report.unexpected = sorted(set(stored) - set(expected))
    report.mis_shaped = {
        name: (stored[name].shape, shape)
        for name, shape in expected.items()
        if name in stored and stored[name].shape != shape
    }
    for spec in stored.values():
        report.dtypes[spec.dtype] = report.dtypes.get(spec.dtype, 0) + 1
    report.parameters = sum(t.numel() for t in model.state_dict().values())
    return report
