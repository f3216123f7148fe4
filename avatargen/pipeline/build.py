"""What every family's build shares, and the one model cache of a process.

``build_pipeline`` gives a render its Pipeline: the family's modules (built and placed once per process, reused while
the model config, seed, device, layout over the ranks and precision stay the same: ``avatargen batch`` renders many jobs with one
set) and the family's chunk steps over them.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import torch
import torch.distributed as dist

from avatargen.config.schema import Config, WeightsSource
from avatargen.errors import CheckpointError
from avatargen.pipeline.family import FamilyEngine, PlacedModels
from avatargen.pipeline.overlap import overlaps
from avatargen.pipeline.parts import place_parts
from avatargen.pipeline.pipeline import Pipeline
from avatargen.runtime.distributed import ParallelContext
from avatargen.runtime.memory import settle_long_lived_objects
from avatargen.runtime.offload import OffloadMonitor
from avatargen.runtime.precision import Precision, choose_precision


def resolve_device(config: Config) -> torch.device:
    name = config.runtime.device.value
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise CheckpointError("runtime.device=cuda but no CUDA device is available; use runtime.device=cpu or auto")
    return torch.device(name)


def resolve_precision(config: Config, device: torch.device, parallel: ParallelContext) -> Precision:
    """``runtime.dtype`` for this device (avatargen/runtime/precision.py); the ranks of a sharded render agree:
    bfloat16 only when every rank chose it."""
    chosen = choose_precision(config.runtime.dtype.value, device)
    if parallel.joined:
        vote = torch.tensor([1 if chosen.dtype == torch.bfloat16 else 0], dtype=torch.int32)
        dist.all_reduce(vote, op=dist.ReduceOp.MIN)  # CPU tensor: gloo, also beside nccl
        if chosen.dtype == torch.bfloat16 and not vote.item():
            chosen = Precision(torch.float32, f"{chosen.reason}; another rank chose float32")
    return chosen


# -- build once per process ----------------------------------------------------------------------------------------

_cache: dict[str, Any] = {}


def _cache_key(config: Config, device: torch.device, parallel: ParallelContext) -> str:
    model = asdict(config.model)  # enums and paths as str(): a key, not a config (OmegaConf takes ~10 ms for it)
    seed = config.seed if config.model.weights == WeightsSource.random else None
    runtime = config.runtime
    placement = [runtime.offload.value, runtime.offload_resident_blocks, str(device), runtime.dtype.value, runtime.quantize.value]
    layout = [parallel.sharded, parallel.world.world_size, asdict(parallel.layout)]
    return json.dumps([model, seed, placement, layout], sort_keys=True, default=str)


def build_models(config: Config, engine: FamilyEngine, device: torch.device, parallel: ParallelContext) -> PlacedModels:
    """The family's parts placed (one loop for every family: avatargen/pipeline/parts.py) and wrapped in its model
    set, with one monitor and the family's precision."""
    monitor = OffloadMonitor(config.runtime.offload.value, config.runtime.offload_resident_blocks, device)
    precision = engine.precision(config, device, parallel)
    modules = place_parts(config, engine.model_parts(config), device, parallel, monitor, precision, engine.build_threads)
    return engine.model_set(config, modules, monitor, precision, parallel)


def place_models(config: Config, engine: FamilyEngine, device: torch.device, parallel: ParallelContext) -> PlacedModels:
    """The family's modules for this render, built and placed once per process and reused while the model config,
    seed, device, sharding and ``runtime.dtype`` stay the same. One model set per process, whatever the family: a
    batch that switches models does not pile them up."""
    device = parallel.device_for(device)
    key = _cache_key(config, device, parallel)
    if key not in _cache:
        _cache.clear()
        _cache[key] = build_models(config, engine, device, parallel)
        settle_long_lived_objects()  # the models live as long as the process, or until another model set
    return _cache[key]


def pipeline_for(config: Config, models: PlacedModels, engine: FamilyEngine, overlap: bool = False,
                 composited: bool | None = None) -> Pipeline:  # fmt: skip
    """The chunk engine over ``engine``'s steps on ``models``. ``composited``: whether the frames are put back into
    the reference picture (None: as configured); a family may choose its defaults by it."""
    steps = engine.chunk_steps(config, models, composited)
    return Pipeline(steps, models, config.model.sample_rate, config.model.fps, overlap=overlap)


def build_pipeline(config: Config, engine: FamilyEngine, device: torch.device, parallel: ParallelContext,
                   composited: bool) -> Pipeline:  # fmt: skip
    """A render's Pipeline: the family's placed models (cached) and its steps; overlapped emission where
    ``runtime.overlap`` asks for it or, when null, where it pays (avatargen/pipeline/overlap.py)."""
    models = place_models(config, engine, device, parallel)
    overlap = engine.overlap and overlaps(config, device, parallel.world.world_size)
    return pipeline_for(config, models, engine, overlap=overlap, composited=composited)
