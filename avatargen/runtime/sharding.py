"""Where parallelism is applied: FSDP2 over a model's declared blocks, in one place.

The model files know nothing of this (torchtitan's split of ``model.py`` and ``parallelize.py``); they only declare
their block stacks (``avatargen/models/structure.py``). The placement pass (``runtime/placement.py``) calls
``shard_model`` on the meta-built model, before any weight exists, and then fills each rank's shards from the
checkpoint. ``shard_model``:

- ``fully_shard`` each declared block (A2V: ``blocks``; SR: ``blocks`` then ``face_blocks``), then the root, last:
  each block is its own all-gather unit, the root holds the embeddings and heads;
- chains explicit forward prefetch, block n -> block n+1 (across stacks: the last main block -> the first face
  block), so the all-gather of the next block is issued while the current one computes;
- with host offload the shards live in host memory (``CPUOffloadPolicy``, pinned when CUDA is available): each block
  is copied host-to-device and all-gathered just before its forward, and freed after it (``reshard_after_forward``),
  so an idle DiT holds no GPU memory and a returning one is unsharded block by block.

Models that declare no block stacks (the encoders, the VAE: a few MB, the VAE convolutional with a causal cache) are
replicated. FSDP's all-gather rebuilds every weight bit for bit, and every rank runs the same inputs and seeded
noise, so a sharded render's frames equal a single-process render's.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from avatargen.models.structure import model_blocks


def shard_model(model: nn.Module, mesh: Any, host_offload: bool) -> list[nn.Module]:
    """FSDP2 per declared block, root last, with block n prefetching block n+1; returns the sharded blocks."""
    from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard

    policy = CPUOffloadPolicy(pin_memory=torch.cuda.is_available()) if host_offload else OffloadPolicy()
    blocks = model_blocks(model)
    for block in blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=True, offload_policy=policy)
    fully_shard(model, mesh=mesh, reshard_after_forward=True, offload_policy=policy)
    if blocks:
        model.set_modules_to_forward_prefetch([blocks[0]])  # the root's pre-forward already asks for block 0
    for current, following in zip(blocks, blocks[1:]):
        current.set_modules_to_forward_prefetch([following])
    return blocks
