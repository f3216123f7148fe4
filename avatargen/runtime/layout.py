"""How the ranks of one render share its work: the layout ``world = guidance x replicas x sequence``, or a pipeline
of denoising steps over every rank.

- **guidance** ranks each run their share of a sampling step's independent model passes (runtime/guidance.py);
- **sequence** ranks each hold a slice of the DiT's tokens (Ulysses, runtime/sequence_parallel.py);
- **replicas** compute the same thing (what every rank of an FSDP-sharded render did before it could split the work);
- **pipeline** stages each run a contiguous group of a causal family's denoising steps on every block, holding only
  those steps' KV caches (timestep-forcing pipeline parallelism, runtime/pipeline_parallel.py). It takes every rank
  of the render and combines with no other split yet; each stage holds the whole model (no FSDP: an all-gather per
  forward would make the stages wait on each other).

The weights are FSDP-sharded (``runtime.shard=fsdp``, the default under torchrun) over ``replicas x sequence`` ranks
and replicated over the guidance ranks (HSDP: ranks that run different passes never wait on each other's weights),
or whole on every rank (``runtime.shard=none``: no all-gather at all, each rank holds the whole model). Resolved once
per render from ``runtime.sequence_parallel``, ``runtime.guidance_parallel``, ``runtime.shard``, the world size and
``runtime.pipeline_parallel`` and what the model family can split (``SplittableWork``); ``--json`` reports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from avatargen.config.schema import Config, ShardMode
from avatargen.errors import ConfigError


@dataclass(frozen=True)
class SplittableWork:
    """What of one render a model family can spread over ranks (``FamilyEngine.parallel_work``)."""

    guidance_passes: int = 1  # independent model passes per sampling step (classifier-free guidance)
    sequence: bool = False  # its DiT's tokens can be split over ranks (its token path is a TokenSequence)
    sequence_by_default: bool = True  # runtime.sequence_parallel=auto splits them (where the token counts pay)
    pipeline_steps: int = 0  # a causal family's denoising steps per block, each with its own cache (0: not causal)


@dataclass(frozen=True)
class ParallelLayout:
    """``world = guidance x replicas x sequence`` ranks, or ``pipeline`` stages of denoising steps, and whether the
    weights are FSDP-sharded."""

    world: int = 1
    guidance: int = 1
    sequence: int = 1
    sharded: bool = False
    pipeline: int = 1  # stages of the pipeline of denoising steps (1: none)

    @property
    def replicas(self) -> int:
        """Ranks that compute the same thing."""
        return self.world // (self.guidance * self.sequence * self.pipeline)

    @property
    def split(self) -> bool:
        """Whether the ranks split a forward's work (its guidance passes or its tokens: float sums may then differ
        from one process's). A pipeline stage runs each of its steps whole, so a pipeline alone is not a split."""
        return self.guidance > 1 or self.sequence > 1

    def report(self) -> dict[str, Any]:
        """What ``--json`` says of the layout."""
        shard = self.replicas * self.sequence
        if not self.sharded:
            weights = "whole on every rank"
        elif self.guidance > 1:
            weights = f"fsdp over {shard} ranks, {self.guidance} copies (one per guidance rank)"
        else:
            weights = f"fsdp over {shard} ranks"
        report = {"world": self.world, "guidance": self.guidance, "sequence": self.sequence,
                  "replicas": self.replicas, "weights": weights}  # fmt: skip
        if self.pipeline > 1:  # only then: the other layouts' reports stay as they were
            report["pipeline"] = self.pipeline
        return report


def shard_mode(config: Config, world_size: int) -> ShardMode:
    """``runtime.shard`` resolved for this world: auto is fsdp under torchrun, none for one process."""
    mode = config.runtime.shard
    if mode == ShardMode.auto:
        mode = ShardMode.fsdp if world_size > 1 else ShardMode.none
    return mode


def _guidance_degree(config: Config, world: int, work: SplittableWork) -> int:
    choice, passes = config.runtime.guidance_parallel, work.guidance_passes
    sequence = config.runtime.sequence_parallel
    if choice is False:
        return 1
    if choice is True:
        if passes < 2:
            raise ConfigError(
                f"runtime.guidance_parallel=true: model={config.model.name} runs one model pass per sampling step "
                "(no guidance to split); set runtime.guidance_parallel=auto or false"
            )
        for degree in (passes, 2):
            if degree <= passes and world % degree == 0 and (sequence == "auto" or (world // degree) % sequence == 0):
                return degree
        raise ConfigError(
            f"runtime.guidance_parallel=true: {world} rank(s) cannot split the {passes} guidance passes of "
            f"model={config.model.name} (it needs a multiple of 2 or {passes} ranks"
            + ("" if sequence == "auto" else f" times runtime.sequence_parallel={sequence}")
            + "); change --nproc-per-node or set runtime.guidance_parallel=auto"
        )
    # auto: one pass per guidance rank when the ranks divide evenly (uneven shares leave ranks idle)
    if world > 1 and passes >= 2 and world % passes == 0 and (sequence == "auto" or (world // passes) % sequence == 0):
        return passes
    return 1


def _pipeline_stages(config: Config, world: int, work: SplittableWork) -> int:
    """``runtime.pipeline_parallel`` resolved: auto = every rank, at most one a step, for a causal family (1 else)."""
    choice, steps = config.runtime.pipeline_parallel, work.pipeline_steps
    if choice == "auto":
        return min(world, steps) if steps else 1
    stages = int(choice)
    if stages > 1 and not steps:
        raise ConfigError(
            f"runtime.pipeline_parallel={stages}: model={config.model.name} cannot spread its denoising steps over "
            "ranks (only a causal family with one KV cache per step can: docs/distributed.md, 'Pipeline of "
            "denoising steps'); set runtime.pipeline_parallel=1"
        )
    if stages > steps > 0:
        raise ConfigError(
            f"runtime.pipeline_parallel={stages}: model={config.model.name} denoises a block in {steps} steps, so "
            f"its pipeline has at most {steps} stages; set runtime.pipeline_parallel to 1-{steps} or auto"
        )
    return stages


def _pipeline_layout(config: Config, world: int, stages: int) -> ParallelLayout:
    """A pipeline of ``stages`` stages over the ``world`` ranks, or ConfigError naming what it does not combine with."""
    runtime, choice = config.runtime, config.runtime.pipeline_parallel
    if stages != world:
        raise ConfigError(
            f"runtime.pipeline_parallel={choice}: {stages} pipeline stages on {world} rank(s); the pipeline takes "
            f"every rank of the render (it combines with no other layout yet): run torchrun --nproc-per-node {stages}"
            + (f", or set runtime.pipeline_parallel={world}" if 1 < world < stages else "")
        )
    if runtime.sequence_parallel not in ("auto", 1):
        raise ConfigError(
            f"runtime.pipeline_parallel={choice} with runtime.sequence_parallel={runtime.sequence_parallel}: a "
            "pipeline of steps does not combine with sequence parallelism yet; set runtime.sequence_parallel=1 or auto"
        )
    if runtime.guidance_parallel is True:
        raise ConfigError(
            f"runtime.pipeline_parallel={choice} with runtime.guidance_parallel=true: a pipeline of steps does not "
            "combine with a guidance split; set runtime.guidance_parallel=auto or false"
        )
    if runtime.shard == ShardMode.fsdp:
        raise ConfigError(
            f"runtime.pipeline_parallel={choice} with runtime.shard=fsdp: each stage holds the whole model (an "
            "all-gather per forward would make the stages wait on each other); set runtime.shard=auto or none"
        )
    return ParallelLayout(world, sharded=False, pipeline=stages)


def resolve_layout(config: Config, world_size: int, work: SplittableWork) -> ParallelLayout:
    """The layout of one render over ``world_size`` ranks; ConfigError naming the key when the request cannot be
    met (a degree that does not divide the ranks, a split the model does not have)."""
    stages = _pipeline_stages(config, world_size, work)
    if stages > 1 or (config.runtime.pipeline_parallel == "auto" and world_size > 1 and work.pipeline_steps):
        return _pipeline_layout(config, world_size, stages)
    guidance = _guidance_degree(config, world_size, work)
    rest = world_size // guidance
    choice = config.runtime.sequence_parallel
    if choice == "auto":
        sequence = rest if work.sequence and work.sequence_by_default else 1
    else:
        sequence = int(choice)
        if sequence > 1 and not work.sequence:
            raise ConfigError(
                f"runtime.sequence_parallel={sequence}: model={config.model.name} cannot split its tokens over ranks; "
                "set runtime.sequence_parallel=1 (or auto)"
            )
        if rest % sequence:
            ranks = f"{world_size} rank(s)" + (f" / {guidance} guidance ranks" if guidance > 1 else "")
            raise ConfigError(
                f"runtime.sequence_parallel={sequence} does not divide the {ranks} of this render; use a divisor of "
                f"{rest}, or auto"
            )
    mode = shard_mode(config, world_size)
    # FSDP over one rank would only copy each weight into itself: a guidance rank alone in its shard group holds them
    layout = ParallelLayout(world_size, guidance, sequence, sharded=mode == ShardMode.fsdp and rest > 1)
    if mode == ShardMode.none and layout.replicas > 1:
        raise ConfigError(
            f"torchrun started {world_size} ranks but runtime.shard=none and the layout leaves {layout.replicas} "
            "ranks computing the same video, each with all the weights: use runtime.shard=auto (or fsdp) to share "
            "the weights, runtime.sequence_parallel=auto to split the work, or avatargen batch (a video per rank)"
        )
    return layout
