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

Both loops move the blocks through a ``StageLink``. ``run_step_pipeline`` is the whole loop over a stream of blocks
(the toy of tests/distributed/pipeline_toy.py and its benchmark). A render runs the chunk engine on every rank
instead (each rank follows the same schedule from the same audio) and its family's steps use the link; the stages
sit on ranks 1, 2, ..., N - 1, 0
(``stage_order``), so rank 0, which writes the video, runs the last steps and decodes each block as it leaves them,
and rank 1 makes each block's input. A stop travels down the pipeline (``PipelineStop``, ``StageLink.finish``), never
as a collective between blocks: a collective per block would make every stage wait for the last one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import torch
import torch.distributed as dist
from torch import Tensor

HEADER_DTYPE = torch.int64  # (block index, 1 = a block follows / 0 = the end)
BLOCK_TAG, SNAPSHOT_TAG = 0, 1  # a block's messages and ring snapshots never match each other's receives


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


def stage_order(world: int) -> tuple[int, ...]:
    """The global rank of each stage of a render's pipeline over ``world`` ranks: 1, 2, ..., world - 1, then 0 (rank
    0 writes the video: as the last stage it decodes each block where it is finished, none travels back to it)."""
    return (*range(1, world), 0)


class _Sender:
    """Sends to one neighbour without waiting for it: the next send waits for the previous one, so at most one block
    is in flight and its buffers are not reused early."""

    def __init__(self, peer: int, group: Any, tag: int = BLOCK_TAG):
        self.peer, self.group, self.tag = peer, group, tag
        self._pending: list[tuple[Any, Tensor]] = []

    def send(self, tensor: Tensor) -> None:
        tensor = tensor.contiguous()
        self._pending.append((dist.isend(tensor, self.peer, group=self.group, tag=self.tag), tensor))

    def flush(self) -> None:
        for work, _ in self._pending:
            work.wait()
        self._pending.clear()


class StageLink:
    """One render's traffic at one stage of a pipeline of steps run by the chunk engine (see the module docstring).

    Between neighbours, per block: a header ``(block, 1)`` and the block's tensors (``shapes``, ``dtype``, on
    ``device``): its latents and whatever the later steps read (a block's audio features). Then one header
    ``(block, 0)``, the end: every stage sends it once, from ``finish``, and every stage but the first receives it
    once, in ``receive`` (its previous stage stopped early: ``ended``) or in ``finish`` (the audio ended on every rank
    alike), so no send is ever left without its receive. Ring snapshots for a resume point go from each stage to the
    last one, under their own tag.
    """

    def __init__(self, ranks: PipelineRanks, shapes: Sequence[tuple[int, ...]], device: torch.device,
                 dtype: torch.dtype = torch.float32):  # fmt: skip
        self.ranks, self.shapes, self.device, self.dtype = ranks, [tuple(s) for s in shapes], device, dtype
        self.ended = False  # the previous stage sent its end
        self.next_block = 0
        following = ranks.next is not None
        self._blocks = _Sender(ranks.next, ranks.group) if following else None
        self._snapshots = _Sender(ranks.ranks[-1], ranks.group, SNAPSHOT_TAG) if following else None

    @property
    def first(self) -> bool:
        return self.ranks.previous is None

    @property
    def last(self) -> bool:
        return self.ranks.next is None

    def _header(self) -> tuple[int, int]:
        header = torch.empty(2, dtype=HEADER_DTYPE)
        dist.recv(header, self.ranks.previous, group=self.ranks.group, tag=BLOCK_TAG)
        block, follows = (int(v) for v in header)
        return block, follows

    def receive(self, block: int) -> list[Tensor] | None:
        """Block ``block``'s tensors from the previous stage, or None where that stage stopped before it."""
        index, follows = self._header()
        if not follows:
            self.ended = True
            return None
        if index != block:
            raise RuntimeError(f"pipeline stage {self.ranks.stage} expected block {block} and got block {index}: "
                               "the ranks follow different schedules")  # fmt: skip
        tensors = []
        for shape in self.shapes:
            tensor = torch.empty(shape, dtype=self.dtype, device=self.device)
            dist.recv(tensor, self.ranks.previous, group=self.ranks.group, tag=BLOCK_TAG)
            tensors.append(tensor)
        self.next_block = block + 1
        return tensors

    def send(self, block: int, tensors: Sequence[Tensor]) -> None:
        """Block ``block``'s tensors to the next stage (once the previous block's have left)."""
        assert self._blocks is not None, "the last stage sends no block"
        self._blocks.flush()
        self._blocks.send(torch.tensor([block, 1], dtype=HEADER_DTYPE))
        for tensor in tensors:
            self._blocks.send(tensor.to(self.dtype))
        self.next_block = block + 1

    def send_snapshot(self, tensors: Sequence[Tensor]) -> None:
        """This stage's ring state (CPU tensors, copies) to the last stage, which saves the resume point."""
        assert self._snapshots is not None, "the last stage keeps its own rings"
        self._snapshots.flush()
        for tensor in tensors:
            self._snapshots.send(tensor)

    def receive_snapshot(self, stage: int, like: Sequence[Tensor]) -> list[Tensor]:
        """Stage ``stage``'s ring state, shaped as ``like`` (on the last stage)."""
        out = []
        for tensor in like:
            received = torch.empty_like(tensor)
            dist.recv(received, self.ranks.ranks[stage], group=self.ranks.group, tag=SNAPSHOT_TAG)
            out.append(received)
        return out

    def finish(self) -> None:
        """After this stage's last step: take the previous stage's end (where it is still to come), send this stage's
        end to the next one, and wait until everything sent has left."""
        if not self.first and not self.ended:
            index, follows = self._header()
            if follows:
                raise RuntimeError(f"pipeline stage {self.ranks.stage} got block {index} after its last block: the "
                                   "ranks follow different schedules")  # fmt: skip
            self.ended = True
        for sender in (self._blocks, self._snapshots):
            if sender is not None:
                sender.flush()
        if self._blocks is not None:
            self._blocks.send(torch.tensor([self.next_block, 0], dtype=HEADER_DTYPE))
            self._blocks.flush()


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
    """Denoise a stream of blocks through the pipeline (a render's traffic, ``StageLink``, without the chunk engine);
    returns how many blocks passed through this rank.

    ``blocks``: on the first stage, each block's input latents (noise), in order; ignored on the others.
    ``step(s, b, x)``: denoising step ``s`` of block ``b`` from latents ``x`` (``shape``, ``dtype``), updating step
    ``s``'s own state (its KV cache) as a side effect; it runs on the stage that owns step ``s`` only.
    ``emit(b, x)``: the last stage's finished block ``b``. Blocks are numbered from ``first_block`` (a resumed
    render's next block).
    """
    if layout.stages != ranks.stages:
        raise ValueError(f"a layout of {layout.stages} stages on {ranks.stages} ranks")
    mine = layout.steps_of(ranks.stage)
    link = StageLink(ranks, [shape], torch.device("cpu"), dtype)
    source = iter(blocks) if link.first and blocks is not None else iter(())
    done = 0
    while True:
        index = first_block + done
        if link.first:
            x = next(source, None)
        else:
            received = link.receive(index)
            x = received[0] if received is not None else None
        if x is None:
            break
        for s in mine:
            x = step(s, index, x)
        if link.last:
            emit(index, x)
        else:
            link.send(index, [x])
        done += 1
    link.finish()
    return done


class PipelineStop:
    """The stop request of a render over a pipeline of steps: asked between steps by the chunk engine.

    Stopping is the first stage's decision alone: it stops between two blocks and sends its end down the pipeline,
    and the other stages finish the blocks already on their way, then stop where the end reaches them
    (``StageLink.ended``). So a stop asked on another rank (a signal that reached only rank 0) is posted in the
    process group's store (``store``, ``key``: one per render), where the first stage reads it."""

    def __init__(self, flag: Callable[[], bool], first: bool, store: Any, key: str):
        self.flag, self.first, self.store, self.key = flag, first, store, key
        self._posted = False

    def __call__(self) -> bool:
        asked = self.flag()
        if asked and not self._posted and self.store is not None:
            self._posted = True
            try:
                self.store.set(self.key, "1")
            except Exception:  # noqa: BLE001 - the store went away: the first stage stops on its own signal
                pass
        if not self.first:
            return False
        if asked:
            return True
        try:
            return self.store is not None and bool(self.store.check([self.key]))
        except Exception:  # noqa: BLE001 - as above
            return False
