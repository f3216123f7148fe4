"""Module: one model, its checkpoint, and where its weights live.

Stages talk to models only through Modules, so placement (device, offload) and checkpoint handling stay out of the
model files and out of the stages.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from avatargen.errors import CheckpointError
from avatargen.runtime.offload import OffloadMonitor, Placement, make_placement


@dataclass(frozen=True)
class ModuleSpec:
    """How to build one of the five models: its checkpoint name and a factory from its params."""

    name: str  # 'audio_encoder', 'text_encoder', 'vae', 'a2v', 'sr'
    build: Callable[[], nn.Module]


def read_checkpoint(path: Path, name: str) -> dict[str, torch.Tensor]:
    """The tensors of module ``name`` in ``path``: a folder holding ``<name>.safetensors``, or one file whose keys are
    prefixed ``<name>.``."""
    if path.is_dir():
        file = path / f"{name}.safetensors"
        if not file.is_file():
            raise CheckpointError(f"checkpoint folder '{path}' has no '{name}.safetensors'; point model.checkpoint at a complete checkpoint")
        return _load(file)
    if not path.is_file():
        raise CheckpointError(f"checkpoint '{path}' does not exist; set model.checkpoint to a .safetensors file or folder, or model.weights=random")
    prefix = f"{name}."
    tensors = {k[len(prefix):]: v for k, v in _load(path).items() if k.startswith(prefix)}
    if not tensors:
        raise CheckpointError(f"checkpoint '{path}' has no tensors for '{name}' (keys prefixed '{prefix}')")
    return tensors


def _load(file: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(file), device="cpu")
    except (SafetensorError, OSError, ValueError) as error:
        reason = str(error).splitlines()[0] if str(error) else error.__class__.__name__
        raise CheckpointError(f"checkpoint file '{file}' could not be read ({reason}); re-create or re-copy it") from error


def check_state_dict(name: str, model: nn.Module, tensors: dict[str, torch.Tensor]) -> None:
    """Raise CheckpointError naming missing, unexpected or mis-shaped tensors (first few of each)."""
    expected = model.state_dict()
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    misshaped = [
        f"{k} {tuple(tensors[k].shape)} != {tuple(v.shape)}"
        for k, v in expected.items()
        if k in tensors and tensors[k].shape != v.shape
    ]
    problems = []
    for label, items in (("missing", missing), ("unexpected", unexpected), ("mis-shaped", misshaped)):
        if items:
            shown = ", ".join(items[:3]) + (f" (+{len(items) - 3} more)" if len(items) > 3 else "")
            problems.append(f"{label}: {shown}")
    if problems:
        raise CheckpointError(
            f"checkpoint for '{name}' does not match the model config ({'; '.join(problems)}); "
            "use the checkpoint's own model config or retrain"
        )


class Module:
    """A model with its weights: built from a spec, loaded from a checkpoint or seeded random init, placed on a device.

    ``active()`` is the placement hook stages use; where the weights are in between is the offload policy's job
    (avatargen/runtime/offload.py): ``none`` keeps them on the device, ``model`` moves the whole model in on entry
    and out on exit, ``block`` keeps them in pinned host memory and streams the transformer blocks in just in time
    (at most ``resident_blocks`` at once). ``monitor`` collects what placement cost; modules of one render share one.
    """

    def __init__(
        self,
        spec: ModuleSpec,
        model: nn.Module,
        device: torch.device,
        offload: str = "none",
        resident_blocks: int = 2,
        monitor: OffloadMonitor | None = None,
    ):
        self.name = spec.name
        self.model = model.eval().requires_grad_(False)
        self.device = device
        self.resident_blocks = resident_blocks
        self.monitor = monitor if monitor is not None else OffloadMonitor(offload, resident_blocks, device)
        self.placement: Placement = make_placement(offload, self.model, device, self.monitor, spec.name, resident_blocks)

    @property
    def offload(self) -> str:
        """The placement policy: 'none', 'model', 'block', or 'fsdp' once sharding owns the weights."""
        return self.placement.policy

    def hand_over_to_fsdp(self) -> None:
        """FSDP is about to shard this model and will place its weights itself: the offload policy lets go (hooks
        removed, weights left where they idle, nothing copied) and only measures stage entries from now on."""
        self.placement.detach()
        self.placement = make_placement("fsdp", self.model, self.device, self.monitor, self.name, self.resident_blocks)

    @classmethod
    def load(
        cls,
        spec: ModuleSpec,
        checkpoint: Path,
        device: torch.device,
        offload: str = "none",
        resident_blocks: int = 2,
        monitor: OffloadMonitor | None = None,
    ) -> "Module":
        """Build the model and load its tensors from ``checkpoint`` (strict: names and shapes must match)."""
        model = spec.build()
        tensors = read_checkpoint(checkpoint, spec.name)
        check_state_dict(spec.name, model, tensors)
        model.load_state_dict(tensors, strict=True)
        return cls(spec, model, device, offload, resident_blocks, monitor)

    @classmethod
    def random(
        cls,
        spec: ModuleSpec,
        seed: int,
        device: torch.device,
        offload: str = "none",
        resident_blocks: int = 2,
        monitor: OffloadMonitor | None = None,
    ) -> "Module":
        """Build the model with a seeded random init (no checkpoint)."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = spec.build()
        return cls(spec, model, device, offload, resident_blocks, monitor)

    def active(self) -> AbstractContextManager[nn.Module]:
        """The model, ready to run on the device for the duration of the ``with`` block."""
        return self.placement.active()

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


def save_checkpoint(modules: dict[str, nn.Module], path: Path) -> None:
    """Write models as one safetensors file with keys prefixed by module name (the format ``read_checkpoint`` reads)."""
    tensors = {f"{name}.{k}": v.detach().cpu().contiguous() for name, m in modules.items() for k, v in m.state_dict().items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path))
