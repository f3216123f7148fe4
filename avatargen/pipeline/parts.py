"""A family's models, declared as parts and placed by one loop for every family.

A family lists its models as ``ModelPart``s: the name, how to build the architecture (on the meta device: no memory,
no weights), where its weights come from (a checkpoint source or a seeded ``RandomInit``), what dtype they are placed
in and compute in, and whether it streams under ``runtime.offload``. ``place_parts`` builds and places them all in
one pass with one shared monitor (diffusers' ``register_modules`` + ``model_cpu_offload_seq`` in one list); the
family then wraps the modules in its own model set (``FamilyEngine.model_set``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from typing import Callable

import torch
from torch import nn

from avatargen.config.schema import Config
from avatargen.models.meta import build_on_meta
from avatargen.models.sequence import has_token_sequence
from avatargen.models.structure import model_blocks
from avatargen.modules import Module
from avatargen.runtime.distributed import ParallelContext
from avatargen.runtime.memory_fit import check_weights_fit, weights_share
from avatargen.runtime.offload import OffloadMonitor
from avatargen.runtime.placement import PlacementPlan, Weights, place
from avatargen.runtime.precision import Precision
from avatargen.threads import torch_threads


@dataclass(frozen=True)
class ModelPart:
    """One model of a family. ``streamed``: it follows ``runtime.offload`` (or FSDP's shards in a sharded render);
    False: a small model kept whole, on the device, or moved in whole for its one call under an offload. ``dtype``:
    what its weights are placed in (None: as built); ``compute_dtype``: what its forwards compute in (None: the
    render's precision, ``runtime.dtype`` resolved)."""

    name: str
    build: Callable[[], nn.Module]
    weights: Callable[[], Weights]
    streamed: bool = True
    dtype: torch.dtype | None = None
    compute_dtype: torch.dtype | None = None


def placement_plan(config: Config, device: torch.device, parallel: ParallelContext, model: nn.Module) -> PlacementPlan:
    """Where one module's weights go: FSDP shards for a model with declared block stacks in a sharded render (its
    shards idling in host memory under ``runtime.offload=model|block``), else the ``runtime.offload`` policy; and
    a model with a token sequence has it split over the render's sequence group, if it has one."""
    offload = config.runtime.offload.value
    sequence = parallel.sequence_group if has_token_sequence(model) else None
    if parallel.sharded and model_blocks(model):
        return PlacementPlan("fsdp", device, mesh=parallel.mesh, fsdp_host_offload=offload in ("model", "block"),
                             sequence_group=sequence)  # fmt: skip
    return PlacementPlan(
        offload, device, resident_blocks=config.runtime.offload_resident_blocks, sequence_group=sequence
    )


def part_plan(config: Config, part: ModelPart, device: torch.device, parallel: ParallelContext,
              model: nn.Module) -> PlacementPlan:  # fmt: skip
    """A streamed part's plan is ``placement_plan``'s; the others stay whole: on the device, or moved in whole for
    their call under ``model`` / ``block``."""
    if part.streamed:
        plan = placement_plan(config, device, parallel, model)
    else:
        plan = PlacementPlan("none" if config.runtime.offload.value == "none" else "model", device)
    return plan if part.dtype is None else replace(plan, dtype=part.dtype)


def place_parts(config: Config, parts: list[ModelPart], device: torch.device, parallel: ParallelContext,
                monitor: OffloadMonitor, precision: Precision, threads: int | None = None) -> dict[str, Module]:  # fmt: skip
    """Every part built on the meta device, its weights' source opened (a missing file is said first: it must be
    fixed whatever the memory) and checked to fit where its weights go, all before any is allocated; then each
    part's weights read (names and shapes checked first) and placed, in order. ``threads``: torch's threads
    meanwhile (None: as they are)."""
    modules: dict[str, Module] = {}
    with torch_threads(threads) if threads else contextlib.nullcontext():
        metas = [build_on_meta(part.build) for part in parts]
        sources = [part.weights() for part in parts]
        plans = [part_plan(config, part, device, parallel, model) for part, model in zip(parts, metas)]
        ranks = parallel.world.world_size
        shares = [weights_share(part.name, model, plan, ranks) for part, model, plan in zip(parts, metas, plans)]
        check_weights_fit(shares, device)
        for part, model, plan, weights in zip(parts, metas, plans, sources):
            compute = part.compute_dtype if part.compute_dtype is not None else precision.dtype
            modules[part.name] = Module(part.name, place(model, weights, plan, monitor, part.name), compute)
    return modules
