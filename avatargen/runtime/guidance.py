"""Guidance parallelism: the independent model passes of one sampling step (classifier-free guidance: conditional,
without text, without audio) run on different ranks, and one all-gather gives every rank all of their outputs.

xDiT's CFG parallel does this for two passes; here a guidance group of ``G`` ranks runs ``P`` passes, pass ``i`` on
group rank ``i % G`` (2 passes on 2 ranks: one each; 3 on 3: one each; 3 on 2: two and one). Every rank then holds
every pass's output, bit for bit as the rank that computed it, and combines them itself: the sampler's formula and
its update run on every rank alike, so the ranks never drift apart. A pass's output is (for a DiT) a latent-sized
tensor: the one exchange per step is a few MB, against whole DiT forwards saved.

On one process (``GuidanceSplit()``) every pass runs here, in order: exactly the single-process sampler.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist
from torch import Tensor

from avatargen.runtime.sequence_parallel import all_gather_single



class GuidanceSplit:
    """Runs the passes of a step that belong to this rank of the guidance group (all of them without a group)."""

    def __init__(self, group: Any = None):
        self.group = group
        self.size = 1 if group is None else dist.get_world_size(group)
        self.rank = 0 if group is None else dist.get_rank(group)

    def run(self, passes: Sequence[Callable[[], Tensor]]) -> list[Tensor]:
        """The outputs of every pass of ``passes``, in order; this rank computes only its own (those ``i`` with
        ``i % size == rank``), the others arrive by one all-gather over the guidance group. Every pass's output must
        have the same shape and dtype."""
        if self.size == 1:
            return [compute() for compute in passes]
        if len(passes) < self.size:
            raise ValueError(f"{len(passes)} guidance passes cannot keep a guidance group of {self.size} ranks busy")
        mine = [compute() for compute in passes[self.rank :: self.size]]  # pass rank, rank + G, ...
        per_rank = -(-len(passes) // self.size)  # the most passes one rank runs
        if len(mine) < per_rank:  # a rank with one pass fewer sends a blank in its place
            mine.append(torch.zeros_like(mine[0]))
        local = torch.stack(mine)  # (per_rank, ...)
        gathered = local.new_empty((self.size * per_rank, *local.shape[1:]))  # (G * per_rank, ...)
        all_gather_single(gathered, local, group=self.group)
        gathered = gathered.unflatten(0, (self.size, per_rank))  # (G, per_rank, ...)
        return [gathered[i % self.size, i // self.size] for i in range(len(passes))]
