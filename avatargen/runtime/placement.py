"""The placement pass: a model built on the meta device gets every weight materialised once, in its final home.

``place()`` is the one place that decides where a module's weights live, in this fixed order:

1. **Structure**: the model's declared block stacks (``avatargen/models/structure.py``) split it into groups: one per
   block, plus "the rest". Nothing is guessed from the module tree and no model is named.
2. **Parallelism or offload**: a model with a token sequence (avatargen/models/sequence.py) first has it split over
   ``sequence_group`` when the plan has one (runtime/sequence_parallel.py; it changes no weight); then one of:
   - ``fsdp``: ``fully_shard`` each block, then the root, with forward prefetch (``runtime/sharding.py``), on the
     meta device; the rank's shards are then allocated on the device (or in host memory under CPU offload);
   - ``none``: each group gets one flat buffer on the device;
   - ``model`` / ``block``: each group gets one flat host buffer (pinned for CUDA), the source of truth that the
     offload policy copies from (``runtime/offload.py``).
3. **Materialise**: each tensor is read from the checkpoint (memory-mapped, one tensor at a time; an FSDP rank reads
   only its own rows) and cast to the run dtype as it is copied into its home; or, for ``model.weights=random``,
   the model's own init runs where the weights now live, under the seed.

No rank ever holds a full copy of a checkpointed model, nothing is moved after it is placed, and there is no
"undo the previous placement" step. Computed, non-persistent buffers (the audio encoder's mel filters) are built
real during the meta build, keep their own dtype and travel with the rest group.
"""

from __future__ import annotations

import copy
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Union

import torch
from torch import Tensor, nn

from avatargen.errors import CheckpointError
from avatargen.models.meta import build_on_meta
from avatargen.models.structure import init_random, model_blocks
from avatargen.runtime.offload import (
    BlockStream,
    FlatGroup,
    OffloadMonitor,
    Placement,
    Resident,
    Unmanaged,
    WholeModel,
)
from avatargen.runtime.sequence_parallel import apply_sequence_parallel
from avatargen.runtime.tensor_source import StateDictSource, TensorSource

POLICIES = ("none", "model", "block", "fsdp")

__all__ = ["POLICIES", "PlacementPlan", "RandomInit", "Weights", "build_on_meta", "check_state_dict", "place"]


@dataclass(frozen=True)
class RandomInit:
    """``model.weights=random``: the model's own init, seeded, run where the weights live."""

    seed: int


Weights = Union[TensorSource, RandomInit]


@dataclass(frozen=True)
class PlacementPlan:
    """Where a module's weights go: the policy, the device, the run dtype, and what the policy needs."""

    policy: str = "none"  # none | model | block | fsdp
    device: torch.device = torch.device("cpu")
    dtype: torch.dtype = torch.float32  # floating parameters are cast to it as they land (buffers keep theirs)
    resident_blocks: int = 2  # block: most blocks of one model on the device at once
    mesh: Any = None  # fsdp: the DeviceMesh
    fsdp_host_offload: bool = False  # fsdp: shards idle in host memory (CPUOffloadPolicy)
    sequence_group: Any = None  # a model with a token sequence splits it over this process group (Ulysses)


def check_state_dict(name: str, model: nn.Module, shapes: dict[str, tuple[int, ...]]) -> None:
    """Raise CheckpointError naming missing, unexpected or mis-shaped tensors (first few of each)."""
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    missing = sorted(set(expected) - set(shapes))
    unexpected = sorted(set(shapes) - set(expected))
    misshaped = [f"{k} {shapes[k]} != {v}" for k, v in expected.items() if k in shapes and tuple(shapes[k]) != v]
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


@contextmanager
def _seeded(seed: int, device: torch.device) -> Iterator[None]:
    """The global RNGs seeded for the block, restored after; only ``device``'s CUDA generator is touched (forking
    every GPU's would create a CUDA context on each of them, on every rank)."""
    devices = [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


# -- the model's tensors and their names ---------------------------------------------------------------------------


@dataclass
class _Slot:
    """One tensor of the model: where it hangs (module, attribute), its state-dict key (None: not persistent)."""

    owners: list[tuple[nn.Module, str]]
    key: str | None
    tensor: Tensor  # meta (to materialise) or real (a computed buffer)
    is_param: bool


def _slots(model: nn.Module) -> list[_Slot]:
    """Every distinct parameter and buffer of ``model`` (shared ones once, with all their owners)."""
    persistent = set(model.state_dict(keep_vars=True))
    by_id: dict[int, _Slot] = {}
    for module_name, module in model.named_modules(remove_duplicate=False):
        prefix = f"{module_name}." if module_name else ""
        for attr, tensor in [*module._parameters.items(), *module._buffers.items()]:
            if tensor is None:
                continue
            key = f"{prefix}{attr}"
            slot = by_id.get(id(tensor))
            if slot is None:
                slot = by_id[id(tensor)] = _Slot([], None, tensor, attr in module._parameters)
            if (module, attr) not in slot.owners:
                slot.owners.append((module, attr))
            if slot.key is None and key in persistent:
                slot.key = key
    return list(by_id.values())


def _groups(model: nn.Module, slots: list[_Slot], per_block: bool) -> tuple[list[_Slot], list[list[_Slot]]]:
    """(the rest, one list per block): a tensor shared with a block goes with the first block that has it."""
    if not per_block:
        return slots, []
    owner_of = {id(s.tensor): s for s in slots}
    taken: set[int] = set()
    blocks = []
    for block in model_blocks(model):
        tensors = {id(t): t for t in [*block.parameters(), *block.buffers()]}
        group = [owner_of[i] for i in tensors if i not in taken]
        taken.update(tensors)
        blocks.append(group)
    return [s for s in slots if id(s.tensor) not in taken], blocks


def _run_dtype(slot: _Slot, dtype: torch.dtype) -> torch.dtype:
    """Floating parameters run in the run dtype; buffers (statistics, filters) keep the dtype the model gives them."""
    return dtype if slot.is_param and slot.tensor.is_floating_point() else slot.tensor.dtype


def _install(slot: _Slot, value: Tensor) -> None:
    """Hang ``value`` where the meta tensor was, under every owner."""
    new = nn.Parameter(value, requires_grad=False) if slot.is_param else value
    for module, attr in slot.owners:
        (module._parameters if slot.is_param else module._buffers)[attr] = new
    slot.tensor = new


def _fill(slots: list[_Slot], weights: Weights, model: nn.Module, device: torch.device, fresh: list[_Slot]) -> None:
    """Copy each tensor from the checkpoint into its home (cast on the copy), or run the seeded init there.

    ``fresh``: the slots just allocated (uninitialised memory). Under the seeded init they start as NaN, so that a
    parameter the model's init forgets fails here, by name, instead of running on whatever the allocator held.
    """
    if isinstance(weights, RandomInit):
        floating = [slot for slot in fresh if slot.tensor.is_floating_point()]
        with torch.no_grad():
            for slot in floating:
                slot.tensor.fill_(float("nan"))
            with _seeded(weights.seed, device):
                init_random(model)
        unset = [slot.key or slot.owners[0][1] for slot in floating if torch.isnan(slot.tensor).any()]
        if unset:
            raise RuntimeError(f"{type(model).__name__}'s random init leaves {', '.join(unset[:5])} unset: "
                               "give the module that owns it a reset_parameters()")
        return
    with torch.no_grad():
        for slot in slots:
            if slot.key is not None:
                slot.tensor.copy_(weights.read(slot.key))


# -- the pass ------------------------------------------------------------------------------------------------------


def place(model: nn.Module, weights: Weights, plan: PlacementPlan, monitor: OffloadMonitor, name: str) -> Placement:
    """Place meta-built ``model`` by ``plan`` and materialise its weights from ``weights`` (see the module docstring).

    Raises CheckpointError naming missing, unexpected or mis-shaped tensors before any weight is read.
    """
    if plan.policy not in POLICIES:
        raise ValueError(f"unknown placement policy '{plan.policy}'; valid: {', '.join(POLICIES)}")
    if not isinstance(weights, RandomInit):
        check_state_dict(name, model, weights.shapes())
    placement = _place_weights(model, weights, plan, monitor, name)
    if plan.sequence_group is not None:  # the model's token path only: its weights are where the policy put them
        apply_sequence_parallel(model, plan.sequence_group)
    return placement


def _place_weights(model: nn.Module, weights: Weights, plan: PlacementPlan, monitor: OffloadMonitor, name: str) -> Placement:
    if plan.policy == "fsdp":
        _place_sharded(model, weights, plan)
        return Unmanaged(model, plan.device, monitor, name)
    cuda = plan.device.type == "cuda"
    offloaded = plan.policy in ("model", "block")
    home = torch.device("cpu") if offloaded else plan.device
    slots = _slots(model)
    fresh = [slot for slot in slots if slot.tensor.device.type == "meta"]
    rest, blocks = _groups(model, slots, per_block=plan.policy != "model")
    groups = [FlatGroup.allocate(group, [_run_dtype(s, plan.dtype) for s in group], home, pin=offloaded and cuda)
              for group in [rest, *blocks]]  # fmt: skip
    if offloaded and cuda:
        for group in groups:
            monitor.pinned(group.nbytes)
    for group, members in zip(groups, [rest, *blocks]):
        for slot, view in zip(members, group.host):
            real = slot.tensor if slot.tensor.device.type != "meta" else None
            _install(slot, view)
            if real is not None:  # a computed buffer: its value comes along into the group
                view.copy_(real)
        group.tensors = [slot.tensor for slot in members]
    _fill(slots, weights, model, home, fresh)
    if plan.policy == "none":
        return Resident(model, plan.device, monitor, name)
    if plan.policy == "model":
        return WholeModel(model, plan.device, monitor, name, groups[0])
    return BlockStream(model, plan.device, monitor, name, plan.resident_blocks, groups[0], groups[1:], model_blocks(model))


def _place_sharded(model: nn.Module, weights: Weights, plan: PlacementPlan) -> None:
    """FSDP2 on the meta model, then this rank's shards allocated and filled from the checkpoint's rows."""
    from torch.distributed.tensor import DTensor

    from avatargen.runtime.sharding import shard_model

    if isinstance(weights, RandomInit):
        # The model's init is model-wide (one RNG stream over all its layers): it runs once on a transient host copy
        # so that every rank and world size gets the same weights, which are then read like a checkpoint.
        full = copy.deepcopy(model)
        fresh = [slot for slot in _slots(full) if slot.tensor.device.type == "meta"]
        for slot in fresh:
            _install(slot, torch.empty_strided(slot.tensor.shape, slot.tensor.stride(), dtype=slot.tensor.dtype))
        _fill([], weights, full, torch.device("cpu"), fresh)
        weights = StateDictSource(full.state_dict())
    computed = [(slot, slot.tensor) for slot in _slots(model) if slot.tensor.device.type != "meta"]  # to_empty wipes them
    for slot in _slots(model):
        if slot.tensor.device.type == "meta" and slot.tensor.is_floating_point():
            _install(slot, torch.empty_like(slot.tensor, dtype=_run_dtype(slot, plan.dtype), device="meta"))
    shard_model(model, plan.mesh, plan.fsdp_host_offload)
    init_device = torch.device("cpu") if plan.fsdp_host_offload else plan.device
    model.to_empty(device=init_device)
    for slot, value in computed:
        for module, attr in slot.owners:
            module._buffers[attr] = value.to(init_device)
    with torch.no_grad():
        for slot in _slots(model):
            if slot.key is None:
                continue
            tensor = slot.tensor
            if isinstance(tensor, DTensor):
                local = tensor.to_local()
                rows = _shard_rows(tensor)
                if local.numel():
                    local.copy_(weights.read(slot.key, rows))
            else:
                tensor.copy_(weights.read(slot.key))


def _shard_rows(tensor: Any) -> slice:
    """The rows of the full tensor that this rank's (dim-0) shard holds."""
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    shape, offset = compute_local_shape_and_global_offset(tensor.shape, tensor.device_mesh, tensor.placements)
    return slice(offset[0], offset[0] + shape[0]) if shape else slice(None)
