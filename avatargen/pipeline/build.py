"""Builds the five Modules of a config: architecture from ``model.*``, weights from a checkpoint or a seeded init,
placed by ``runtime.*`` (and sharded under torchrun) in one pass."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from functools import partial
from importlib import resources
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from avatargen.config.schema import Config, WeightsSource
from avatargen.errors import CheckpointError
from avatargen.models import MODEL_CLASSES
from avatargen.models.structure import model_blocks
from avatargen.modules import Module, ModuleSpec
from avatargen.runtime.distributed import ParallelContext, world_info
from avatargen.runtime.offload import OffloadMonitor
from avatargen.runtime.placement import PlacementPlan, RandomInit, build_on_meta, place
from avatargen.runtime.precision import Precision, choose_precision
from avatargen.runtime.tensor_source import open_checkpoint
from avatargen.threads import torch_threads


@dataclass
class ModelSet:
    """The five modules of one model config, the monitor of their placement (reset per render), and the compute
    precision their forwards run in."""

    audio_encoder: Module
    text_encoder: Module
    vae: Module
    a2v: Module
    sr: Module
    monitor: OffloadMonitor
    precision: Precision = Precision(torch.float32, "default")

    def all(self) -> list[Module]:
        return [self.audio_encoder, self.text_encoder, self.vae, self.a2v, self.sr]


def module_specs(config: Config) -> list[ModuleSpec]:
    return [
        ModuleSpec(name, partial(model_class, getattr(config.model, name))) for name, model_class in MODEL_CLASSES.items()
    ]


def shipped_checkpoint(name: str) -> Path:
    """The checkpoint shipped in the package for model config ``name``."""
    return Path(str(resources.files("avatargen"))) / "checkpoints" / name


def resolve_checkpoint(config: Config) -> Path:
    """``model.checkpoint`` or the shipped one; fails with the fix when neither exists."""
    if config.model.checkpoint:
        return Path(config.model.checkpoint).expanduser()
    path = shipped_checkpoint(config.model.name)
    if not path.exists():
        raise CheckpointError(
            f"no checkpoint is shipped for model '{config.model.name}'; set model.checkpoint=PATH, "
            "or model.weights=random for an untrained model (noise video, for tests)"
        )
    return path


def resolve_device(config: Config) -> torch.device:
    name = config.runtime.device.value
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise CheckpointError("runtime.device=cuda but no CUDA device is available; use runtime.device=cpu or auto")
    return torch.device(name)


def placement_plan(config: Config, device: torch.device, parallel: ParallelContext, model: nn.Module) -> PlacementPlan:
    """Where one module's weights go: FSDP shards for a model with declared block stacks in a sharded render (its
    shards idling in host memory under ``runtime.offload=model|block``), else the ``runtime.offload`` policy."""
    offload = config.runtime.offload.value
    if parallel.sharded and model_blocks(model):
        return PlacementPlan("fsdp", device, mesh=parallel.mesh, fsdp_host_offload=offload in ("model", "block"))
    return PlacementPlan(offload, device, resident_blocks=config.runtime.offload_resident_blocks)


def resolve_precision(config: Config, device: torch.device, parallel: ParallelContext) -> Precision:
    """``runtime.dtype`` for this device (avatargen/runtime/precision.py); the ranks of a sharded render agree:
    bfloat16 only when every rank chose it."""
    chosen = choose_precision(config.runtime.dtype.value, device)
    if parallel.sharded:
        vote = torch.tensor([1 if chosen.dtype == torch.bfloat16 else 0], dtype=torch.int32)
        dist.all_reduce(vote, op=dist.ReduceOp.MIN)  # CPU tensor: gloo, also beside nccl
        if chosen.dtype == torch.bfloat16 and not vote.item():
            chosen = Precision(torch.float32, f"{chosen.reason}; another rank chose float32")
    return chosen


def build_modules(
    config: Config, device: torch.device, parallel: ParallelContext | None = None, precision: Precision | None = None
) -> ModelSet:
    """All five modules, built on the meta device and placed in one pass: loaded strictly (names and shapes checked)
    from the memory-mapped checkpoint, or randomly initialised from ``seed`` where they live; placed by
    ``runtime.offload`` (or FSDP-sharded in a sharded render) with one shared monitor. Their forwards compute in
    ``precision`` (default: ``runtime.dtype`` resolved for ``device``); the weights stay float32."""
    parallel = parallel if parallel is not None else ParallelContext(world_info())
    precision = precision if precision is not None else resolve_precision(config, device, parallel)
    offload, resident_blocks = config.runtime.offload.value, config.runtime.offload_resident_blocks
    monitor = OffloadMonitor(offload, resident_blocks, device)
    random = config.model.weights == WeightsSource.random
    checkpoint = None if random else resolve_checkpoint(config)
    modules = []
    # One thread: building and placing is hundreds of small copies and inits; on two threads under load they took
    # 0.66 s against 0.05 s for the tiny model, the same weights to the bit (copies and the seeded init do not depend
    # on the thread count).
    with torch_threads(1):
        for i, spec in enumerate(module_specs(config)):
            model = build_on_meta(spec.build)
            weights = RandomInit(config.seed + i) if random else open_checkpoint(checkpoint, spec.name)
            plan = placement_plan(config, device, parallel, model)
            modules.append(Module(spec.name, place(model, weights, plan, monitor, spec.name), precision.dtype))
    return ModelSet(*modules, monitor=monitor, precision=precision)


# -- build once per process ----------------------------------------------------------------------------------------

_cache: dict[str, ModelSet] = {}


def _cache_key(config: Config, device: torch.device, parallel: ParallelContext, precision: Precision) -> str:
    model = asdict(config.model)  # enums and paths as str(): a key, not a config (OmegaConf takes ~10 ms for it)
    seed = config.seed if config.model.weights == WeightsSource.random else None
    placement = [config.runtime.offload.value, config.runtime.offload_resident_blocks, str(device), precision.name]
    return json.dumps([model, seed, placement, parallel.sharded, parallel.world.world_size], sort_keys=True, default=str)


def place_modules(config: Config, device: torch.device, parallel: ParallelContext) -> ModelSet:
    """The five modules for this render, built and placed once per process and reused while the model config, seed,
    device, sharding and resolved ``runtime.dtype`` stay the same (``avatargen batch`` renders many jobs with one set)."""
    device = parallel.device_for(device)
    precision = resolve_precision(config, device, parallel)  # the CPU probe runs once per process
    key = _cache_key(config, device, parallel, precision)
    if key not in _cache:
        _cache.clear()  # one model set per process: a batch that switches models does not pile them up
        _cache[key] = build_modules(config, device, parallel, precision)
    return _cache[key]
