"""Module: one model, its checkpoint, and where its weights live.

Stages talk to models only through Modules, so placement (device, offload, sharding) and checkpoint handling stay
out of the model files and out of the stages. A Module is made in one pass: the model is built on the meta device,
then ``runtime.placement.place`` puts every weight in its final home straight from the checkpoint (or the seeded
init), so no full copy of the weights ever exists anywhere else.
"""

from __future__ import annotations

import hashlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

import torch
from safetensors.torch import save_file
from torch import nn

from avatargen.runtime.offload import OffloadMonitor, Placement
from avatargen.runtime.placement import PlacementPlan, RandomInit, Weights, build_on_meta, check_state_dict, place
from avatargen.runtime.precision import autocast_for
from avatargen.runtime.tensor_source import StateDictSource, TensorSource, open_checkpoint

__all__ = ["Module", "ModuleSpec", "PlacementPlan", "check_state_dict", "open_checkpoint", "read_checkpoint", "save_checkpoint", "tensors_digest"]


@dataclass(frozen=True)
class ModuleSpec:
    """How to build one of the models: its checkpoint name and a factory from its params."""

    name: str  # 'audio_encoder', 'text_encoder', 'vae', 'a2v', 'sr'
    build: Callable[[], nn.Module]


def read_checkpoint(path: Path, name: str) -> dict[str, torch.Tensor]:
    """Every tensor of module ``name`` in checkpoint ``path``, read into memory (tools and tests; renders never do
    this: the placement pass reads one tensor at a time)."""
    source = open_checkpoint(path, name)
    return {key: source.read(key) for key in source.shapes()}


class Module:
    """A model with its weights in place: ``active()`` is the placement hook stages use.

    Where the weights are in between is the policy's job (avatargen/runtime/offload.py): ``none`` keeps them on the
    device, ``model`` copies the whole model in on entry and drops the device copy on exit, ``block`` keeps them in pinned host memory
    and streams the model's declared blocks in just in time (at most ``resident_blocks`` at once), ``fsdp`` shards
    them over the ranks. ``monitor`` collects what placement cost; modules of one render share one.
    ``compute_dtype`` is what its forwards compute in (``runtime.dtype``, avatargen/runtime/precision.py): bfloat16
    runs them under autocast while the weights stay as placed.
    """

    def __init__(self, name: str, placement: Placement, compute_dtype: torch.dtype = torch.float32):
        self.name = name
        self.placement = placement
        self.model = placement.model
        self.device = placement.device
        self.monitor = placement.monitor
        self.compute_dtype = compute_dtype
        self._weights_digest: str | None = None

    @classmethod
    def place(cls, spec: ModuleSpec, weights: Weights, plan: PlacementPlan, monitor: OffloadMonitor | None = None) -> "Module":
        """Build ``spec`` on the meta device and place it by ``plan`` with ``weights`` (a checkpoint source, in-memory
        tensors, or ``RandomInit(seed)``); names and shapes are checked before any weight is read."""
        monitor = monitor if monitor is not None else OffloadMonitor(plan.policy, plan.resident_blocks, plan.device)
        return cls(spec.name, place(build_on_meta(spec.build), weights, plan, monitor, spec.name))

    @classmethod
    def load(cls, spec: ModuleSpec, checkpoint: Path, plan: PlacementPlan = PlacementPlan()) -> "Module":
        """The model with its tensors from ``checkpoint`` (strict: names and shapes must match), memory-mapped, placed
        by ``plan`` (default: whole, on the CPU, float32)."""
        source: TensorSource = open_checkpoint(checkpoint, spec.name)
        return cls.place(spec, source, plan)

    @classmethod
    def random(cls, spec: ModuleSpec, seed: int, plan: PlacementPlan = PlacementPlan()) -> "Module":
        """The model with a seeded random init (no checkpoint), initialised where ``plan`` places its weights."""
        return cls.place(spec, RandomInit(seed), plan)

    @classmethod
    def from_state_dict(
        cls, spec: ModuleSpec, tensors: dict[str, torch.Tensor], plan: PlacementPlan, monitor: OffloadMonitor | None = None
    ) -> "Module":
        """The model with in-memory ``tensors`` (a trained or modified state dict), placed by ``plan``."""
        return cls.place(spec, StateDictSource(tensors), plan, monitor)

    @property
    def offload(self) -> str:
        """The placement policy: 'none', 'model', 'block' or 'fsdp'."""
        return self.placement.policy

    @contextmanager
    def active(self) -> Iterator[nn.Module]:
        """The model, ready to run on the device (in ``compute_dtype``) for the duration of the ``with`` block."""
        with self.placement.active() as model, autocast_for(self.device, self.compute_dtype):
            yield model

    def weights_digest(self) -> str:
        """SHA-256 of the weights the model holds (each tensor's name, dtype, shape and bytes), taken once per Module
        (~2 ms a MB): with the code and the compute settings, what its outputs depend on."""
        if self._weights_digest is None:
            self._weights_digest = tensors_digest(self.model.state_dict().items())
        return self._weights_digest


def tensors_digest(named: Iterable[tuple[str, torch.Tensor]]) -> str:
    """SHA-256 of named tensors, in the order given: each one's name, dtype, shape and bytes."""
    digest = hashlib.sha256()
    for name, tensor in named:
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f"{name} {tensor.dtype} {tuple(tensor.shape)}".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().data)
    return digest.hexdigest()


def save_checkpoint(modules: dict[str, nn.Module], path: Path) -> None:
    """Write models as one safetensors file with keys prefixed by module name (a layout ``open_checkpoint`` reads)."""
    tensors = {f"{name}.{k}": v.detach().cpu().contiguous() for name, m in modules.items() for k, v in m.state_dict().items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path))
