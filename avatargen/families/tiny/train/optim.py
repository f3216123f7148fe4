"""The learning-rate schedule every phase uses: linear warm-up, then cosine decay to 5 % of the peak."""

from __future__ import annotations

import math

import torch


def warmup_cosine(optimizer: torch.optim.Optimizer, total_steps: int, warmup_fraction: float = 0.05):
    """A LambdaLR over ``total_steps`` (any value >= 1)."""
    warmup = max(1, int(total_steps * warmup_fraction))

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total_steps - warmup)
        return 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def optimizer_step(
    optimizer: torch.optim.Optimizer, schedule, loss: torch.Tensor, params, max_norm: float | None = 1.0
) -> None:
    """One update every phase shares: backward, optional gradient-norm clipping, optimizer and schedule step."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if max_norm is not None:
        torch.nn.utils.clip_grad_norm_(params, max_norm)
    optimizer.step()
    schedule.step()
