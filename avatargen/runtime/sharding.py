"""Where parallelism is applied: FSDP2 over the transformer blocks of the big models, in one place.

The model files know nothing of this (torchtitan's split of ``model.py`` and ``parallelize.py``). For a sharded
render every rank builds the same modules (same checkpoint, or the same seeded init), then ``shard_modules``:

- ``fully_shard`` each transformer block of the A2V DiT and the SR DiT (``.blocks``, SR also ``.face_blocks``),
  then the root, last: each block is its own all-gather unit, the root holds the embeddings and heads;
- chains explicit forward prefetch, block n -> block n+1 (SR: the last main block -> the first face block), so the
  all-gather of the next block is issued while the current one computes;
- with ``runtime.offload=model`` or ``block`` the shards live in host memory (``CPUOffloadPolicy``, pinned when CUDA is
  available): each block is copied host-to-device and all-gathered just before its forward, and freed after it
  (``reshard_after_forward``), so an idle DiT holds no GPU memory and a returning one is unsharded block by block.

The small models (audio and text encoders, the VAE) are replicated: they are a few MB, and the VAE is convolutional
with a causal cache, not a stack of blocks. FSDP's all-gather rebuilds every weight bit for bit, and every rank runs
the same inputs and seeded noise, so a sharded render's frames equal a single-process render's.
"""

from __future__ import annotations

import json
import os
from typing import Any

import torch
from omegaconf import OmegaConf
from torch import nn

from avatargen.config.schema import Config, Offload, WeightsSource
from avatargen.errors import BadInputError
from avatargen.pipeline.build import ModelSet, build_modules
from avatargen.runtime.distributed import ParallelContext
from avatargen.runtime.offload import transformer_blocks

SHARDED_MODULES = ("a2v", "sr")  # the DiTs: the only modules large enough to be worth sharding


def shard_model(model: nn.Module, mesh: Any, offload: bool) -> list[nn.Module]:
    """FSDP2 per block, root last, with block n prefetching block n+1; returns the sharded blocks."""
    from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard

    policy = CPUOffloadPolicy(pin_memory=torch.cuda.is_available()) if offload else OffloadPolicy()
    blocks = transformer_blocks(model)
    for block in blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=True, offload_policy=policy)
    fully_shard(model, mesh=mesh, reshard_after_forward=True, offload_policy=policy)
    if blocks:
        model.set_modules_to_forward_prefetch([blocks[0]])  # the root's pre-forward already asks for block 0
    for current, following in zip(blocks, blocks[1:]):
        current.set_modules_to_forward_prefetch([following])
    return blocks


def shard_modules(models: ModelSet, parallel: ParallelContext, config: Config) -> ModelSet:
    """Apply FSDP2 to the DiTs of ``models`` over ``parallel.mesh`` (no-op for a single-process render)."""
    if not parallel.sharded:
        return models
    # Sharded weights idle in host memory under either offload policy; FSDP streams them per block itself.
    offload = config.runtime.offload in (Offload.model, Offload.block)
    for name in SHARDED_MODULES:
        module = getattr(models, name)
        module.hand_over_to_fsdp()  # first: FSDP replaces the parameters, the old policy must not touch them after
        shard_model(module.model, parallel.mesh, offload)
    return models


# -- build once per process ----------------------------------------------------------------------------------------

_cache: dict[str, ModelSet] = {}


def _cache_key(config: Config, device: torch.device, parallel: ParallelContext) -> str:
    model = OmegaConf.to_container(OmegaConf.structured(config.model), enum_to_str=True)
    seed = config.seed if config.model.weights == WeightsSource.random else None
    placement = [config.runtime.offload.value, config.runtime.offload_resident_blocks, str(device)]
    return json.dumps([model, seed, placement, parallel.sharded, parallel.world.world_size], sort_keys=True, default=str)


def place_modules(config: Config, device: torch.device, parallel: ParallelContext) -> ModelSet:
    """The five modules for this render, built (and sharded) once per process and reused while the model config,
    seed, device and sharding stay the same (``avatargen batch`` renders many jobs with one set)."""
    device = parallel.device_for(device)
    key = _cache_key(config, device, parallel)
    if key not in _cache:
        _cache.clear()  # one model set per process: a batch that switches models does not pile them up
        _cache[key] = shard_modules(build_modules(config, device), parallel, config)
    _fault_for_tests(_cache[key], parallel)
    return _cache[key]


def _fault_for_tests(models: ModelSet, parallel: ParallelContext) -> None:
    """``AVATARGEN_TEST_FAIL=RANK:setup|step`` makes one rank fail (tests of failure propagation only)."""
    spec = os.environ.get("AVATARGEN_TEST_FAIL", "")
    rank, _, where = spec.partition(":")
    if not spec or int(rank) != parallel.world.rank or getattr(models.a2v, "fault_hooked", False):
        return
    if where == "setup":
        raise BadInputError(f"test fault on rank {rank} before rendering (AVATARGEN_TEST_FAIL={spec})")
    calls = {"n": 0}

    def fail(module: nn.Module, args: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 2:  # mid-render: the other ranks are inside FSDP collectives
            raise RuntimeError(f"test fault on rank {rank} in an A2V forward (AVATARGEN_TEST_FAIL={spec})")

    models.a2v.model.register_forward_pre_hook(fail)
    models.a2v.fault_hooked = True


def render_as_follower(pipeline: Any, reference: Any, source: Any, prompt: str, should_stop: Any) -> dict[str, Any]:
    """A non-primary rank of a sharded render: the same steps and collectives as rank 0, frames into a NullSink, the
    user's output path never touched. Returns a small report (the primary's is the real one)."""
    from avatargen.io.null_sink import NullSink

    try:
        stats = pipeline.render(reference, source, [NullSink()], prompt, should_stop=should_stop)
    finally:
        source.close()
    duration = stats.frames / pipeline.config.model.fps
    wall = stats.wall_s
    # The same keys as the primary's report, so any caller can print it; "output" says who wrote the video.
    return {"output": "(no output on this rank: rank 0 writes it)", "weights": None, "frames": stats.frames,
            "fps": pipeline.config.model.fps, "duration_s": round(duration, 4), "chunks": stats.n_chunks,
            "i_chunks": stats.i_chunks, "ttff_s": None, "wall_s": round(wall, 4),
            "gen_fps": round(stats.frames / wall, 3) if wall > 0 else None,
            "rtf": round(wall / duration, 4) if duration > 0 else None, "peak_rss_mb": None, "device": None,
            "stage_s": {k: round(v, 4) for k, v in stats.stage_s.items()}, "seams": stats.seams,
            "resumed_from": 0}  # fmt: skip
