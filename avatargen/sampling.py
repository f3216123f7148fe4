"""Flow-matching time schedule and the Euler sampler, independent of any model.

Convention (rectified flow): x_t = (1 - t) * x_0 + t * noise, t = 1 is pure noise, the model predicts the velocity
v = noise - x_0, and sampling integrates dx/dt = v from t = 1 down to t = 0.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor


def time_grid(steps: int, shift: float = 1.0) -> list[float]:
    """``steps + 1`` times from 1 to 0; ``shift > 1`` spends more of the steps at high noise (as in SD3/Flux)."""
    grid = torch.linspace(1.0, 0.0, steps + 1, dtype=torch.float64)
    shifted = shift * grid / (1 + (shift - 1) * grid)
    return [float(t) for t in shifted]


def noisy_sample(x0: Tensor, noise: Tensor, t: Tensor) -> Tensor:
    """x_t for training; ``t`` broadcasts over x0's trailing dimensions (shape (B,))."""
    t = t.view(-1, *([1] * (x0.dim() - 1)))
    return (1 - t) * x0 + t * noise


def euler_sample(
    velocity: Callable[[Tensor, Tensor], Tensor],
    noise: Tensor,
    steps: int,
    shift: float = 1.0,
) -> Tensor:
    """Integrate from ``noise`` (t=1) to a sample (t=0) with ``steps`` Euler steps.

    ``velocity(x_t, t)`` takes ``t`` of shape (B,) and returns a tensor shaped like ``x_t``.
    """
    x = noise
    times = time_grid(steps, shift)
    for t_now, t_next in zip(times[:-1], times[1:]):
        t = torch.full((x.shape[0],), t_now, dtype=x.dtype, device=x.device)
        x = x + (t_next - t_now) * velocity(x, t)
    return x
