"""Timestep-forcing pipeline parallelism: the denoising steps of a causal, few-step family spread over ranks.

A causal family denoises each block of latents in a few steps (LiveAvatar: 4), and step ``s`` of block ``b`` reads
only what step ``s`` of the blocks before wrote (that step's KV cache). So the steps can be stages of a pipeline:
rank ``r`` owns a contiguous group of steps and their caches; block ``b`` runs its steps on rank ``r`` while block
``b + 1`` runs the earlier steps on rank ``r - 1``. Once the pipeline is full, one finished block leaves the last
rank per stage time instead of per block time::

    rank 0  (steps 0-1)  | b0 | b1 | b2 | b3 | ...
    rank 1  (steps 2-3)       | b0 | b1 | b2 | b3 | ...      -> emit b0, b1, ...

Each step runs the same code on the same inputs as in one process, so the blocks are the single-process blocks bit
for bit (where each rank computes with the same threads). What travels between neighbours, by point-to-point sends:
a header ``(block, flag)`` and the block's latents; a flag of 0 after the last block tells every rank to stop.

Sequence parallelism splits one forward's tokens and pays an all-to-all per layer; this schedule splits the steps
and pays one send of a block's latents per stage (docs/distributed.md, "Pipeline of denoising steps").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

import torch
import torch.distributed as dist
from torch import Tensor

HEADER_DTYPE = torch.int64  # (block index, 1 = a block follows / 0 = the end)


@dataclass(frozen=True)
class StepLayout:
    """Which denoising steps each of ``stages`` pipeline ranks owns: contiguous groups, the earlier ranks taking the
    larger groups where ``stages`` does not divide ``steps`` (the first rank also makes each block's input)."""

    steps: int
    stages: int

    def __post_init__(self) -> None:
        if not 1 <= self.stages <= self.steps:
            raise ValueError(f"{self.stages} pipeline stages for {self.steps} denoising steps: use 1 to {self.steps}")

    def steps_of(self, stage: int) -> range:
        """The steps stage ``stage`` runs, in order."""
        base, extra = divmod(self.steps, self.stages)
        start = stage * base + min(stage, extra)
        return range(start, start + base + (1 if stage < extra else 0))


@dataclass(frozen=True)
class PipelineRanks:
    """This process's place in the pipeline: its stage, the number of stages, and its neighbours' global ranks
    (None at the ends). ``ranks`` lists the global rank of each stage in order."""

    stage: int
    ranks: tuple[int, ...]
    group: Any = None  # the process group the sends go over (None: the default group)

    @property
    def stages(self) -> int:
        return len(self.ranks)

    @property
    def previous(self) -> int | None:
        return self.ranks[self.stage - 1] if self.stage > 0 else None

    @property
    def next(self) -> int | None:
        return self.ranks[self.stage + 1] if self.stage + 1 < self.stages else None

    @classmethod
    def alone(cls) -> PipelineRanks:
        """One stage: every step in this process (the single-process loop, same code path)."""
        return cls(0, (0,))

    @classmethod
    def of_world(cls, group: Any = None) -> PipelineRanks:
        """Every rank of ``group`` (default: the world) a stage, in rank order."""
        ranks = tuple(dist.get_process_group_ranks(group)) if group is not None else tuple(range(dist.get_world_size()))
        return cls(ranks.index(dist.get_rank()), ranks, group)


class _Sender:
    """Sends to one neighbour without waiting for it: the next send waits for the previous one, so at most one block
    is in flight and its buffers are not reused early."""

    def __init__(self, peer: int, group: Any):
        self.peer, self.group = peer, group
        self._pending: list[tuple[Any, Tensor]] = []

    def send(self, tensor: Tensor) -> None:
        tensor = tensor.contiguous()
        self._pending.append((dist.isend(tensor, self.peer, group=self.group), tensor))

    def flush(self) -> None:
        for work, _ in self._pending:
            work.wait()
        self._pending.clear()


def run_step_pipeline(
    layout: StepLayout,
    ranks: PipelineRanks,
    blocks: Iterable[Tensor] | None,
    step: Callable[[int, int, Tensor], Tensor],
    emit: Callable[[int, Tensor], None],
    shape: tuple[int, ...],
    dtype: torch.dtype = torch.float32,
    first_block: int = 0,
) -> int:
    """Denoise a stream of blocks through the pipeline; returns how many blocks passed through this rank.

    ``blocks``: on the first stage, each block's input latents (noise), in order; ignored on the others.
    ``step(s, b, x)``: denoising step ``s`` of block ``b`` from latents ``x`` (``shape``, ``dtype``), updating step
    ``s``'s own state (its KV cache) as a side effect; it runs on the stage that owns step ``s`` only.
    ``emit(b, x)``: the last stage's finished block ``b``. Blocks are numbered from ``first_block`` (a resumed
    render's next block).
    """
    if layout.stages != ranks.stages:
        raise ValueError(f"a layout of {layout.stages} stages on {ranks.stages} ranks")
    mine = layout.steps_of(ranks.stage)
    sender = _Sender(ranks.next, ranks.group) if ranks.next is not None else None
    header = torch.empty(2, dtype=HEADER_DTYPE)
    done = 0
    source = iter(blocks) if ranks.previous is None else None
    try:
        while True:
            if source is not None:
                x = next(source, None)
                if x is None:
                    break
                index = first_block + done
            else:
                dist.recv(header, ranks.previous, group=ranks.group)
                index, follows = int(header[0]), int(header[1])
                if not follows:
                    break
                x = torch.empty(shape, dtype=dtype)
                dist.recv(x, ranks.previous, group=ranks.group)
            for s in mine:
                x = step(s, index, x)
            if sender is not None:
                sender.flush()
                sender.send(torch.tensor([index, 1], dtype=HEADER_DTYPE))
                sender.send(x)
            else:
                emit(index, x)
            done += 1
        if sender is not None:
            sender.flush()
            sender.send(torch.tensor([first_block + done, 0], dtype=HEADER_DTYPE))
    finally:
        if sender is not None:
            sender.flush()
    return done
