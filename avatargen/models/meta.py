"""Building a model on the meta device: its structure and shapes, no weight memory, and no init arithmetic.

A meta tensor has a shape and a dtype but no values, so the random and constant initialisers a constructor runs
(``nn.Embedding``'s ``normal_``, a model's ``init_weights()``) write nothing anyone reads: the real init runs later,
where the weights live (``structure.init_random``), or the checkpoint fills them. Skipping them is also what keeps
a meta build cheap: torch implements several meta kernels (``normal_``, elementwise math) as Python reference
kernels whose first call imports ``torch._dynamo``, about a second of start-up on every CLI run. Fixed tables a
model computes at build time (sin-cos positions) are therefore computed on the CPU explicitly and copied in.

Only initialisers are skipped: every layer is still constructed, so a shape the architecture rejects (heads that do
not divide dim, a grid not divisible by its patch) raises exactly as an eager build would.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

ModelT = TypeVar("ModelT", bound=nn.Module)

# Functions that only write values into their first argument (the ``nn.init`` ones that dispatch to torch-function
# modes, and the tensor methods the others reach): on a meta tensor they are no-ops that cost a Python kernel.
_VALUE_WRITERS = frozenset(
    {
        nn.init.normal_,
        nn.init.uniform_,
        nn.init.constant_,
        nn.init.kaiming_uniform_,
        Tensor.normal_,
        Tensor.uniform_,
        Tensor.fill_,
        Tensor.zero_,
    }
)


class _SkipInitOnMeta(TorchFunctionMode):
    """Turns the value writers above into no-ops on meta tensors; every other call runs unchanged."""

    def __torch_function__(self, func: Callable, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func in _VALUE_WRITERS:
            target = args[0] if args else kwargs.get("tensor")  # nn.init passes its tensor by keyword
            if isinstance(target, Tensor) and target.is_meta:
                return target
        return func(*args, **kwargs)


def build_on_meta(build: Callable[[], ModelT]) -> ModelT:
    """``build()`` on the meta device: the structure and shapes, no weight memory (eval mode, no grads).

    Errors the constructor raises for a bad shape propagate unchanged.
    """
    with torch.device("meta"), _SkipInitOnMeta():
        model = build()
    return model.eval().requires_grad_(False)
