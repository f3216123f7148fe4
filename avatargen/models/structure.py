"""What a model tells the runtime about itself: its block stacks, and how to initialise it without a checkpoint.

The runtime (placement, offload, FSDP) never guesses a model's structure and never names a model: a model that has
stacks of transformer blocks worth streaming or sharding one by one returns them from ``block_stacks()``, in the
order its forward runs them; everything else (embeddings, norms, heads) is "the rest" and is placed as one group. A
model without ``block_stacks()`` is all rest (the encoders and the VAE: a few MB each).

``init_weights()`` is the model's own random initialisation beyond each layer's ``reset_parameters()`` (adaLN-Zero,
sin-cos positions, zero heads). The runtime calls it after the weights were materialised where they live, so a
model built on the meta device can be randomly initialised without a copy elsewhere.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from torch import nn


@runtime_checkable
class HasBlockStacks(Protocol):
    """A model with stacks of blocks: the units that block offload streams and FSDP shards one at a time."""

    def block_stacks(self) -> list[nn.ModuleList]:
        """The model's block stacks, in the order its forward runs them."""
        ...


def model_blocks(model: nn.Module) -> list[nn.Module]:
    """Every block of ``model``'s declared stacks, in forward order (empty for a model that declares none)."""
    if not isinstance(model, HasBlockStacks):
        return []
    return [block for stack in model.block_stacks() for block in stack]


def init_random(model: nn.Module) -> None:
    """Random init in place, under the caller's RNG state: each layer's ``reset_parameters()`` in module order, then
    the model's ``init_weights()`` if it has one (the same RNG draws, in the same order, as an eager build)."""
    for module in model.modules():
        reset = getattr(module, "reset_parameters", None)
        if callable(reset):
            reset()
    init = getattr(model, "init_weights", None)
    if callable(init):
        init()
