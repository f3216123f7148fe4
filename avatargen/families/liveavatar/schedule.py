"""LiveAvatar's sampling schedule: diffusers' ``FlowMatchEulerDiscreteScheduler(shift=3)`` with 4 steps, as the
reference builds it (``causal_s2v_pipeline.py``), and its Euler step.

The scheduler shifts its sigma range once when it is made and the sampled sigmas again in ``set_timesteps``, so the
last sigma is shift-3 applied twice to 1/1000; the reference's ``--sample_shift`` never reaches it (the shift is
hard-coded to 3). The distilled LoRA was trained on these four timesteps, so they are kept as they are.
"""

from __future__ import annotations

import torch
from torch import Tensor

TRAIN_TIMESTEPS = 1000


def _shift(sigma: Tensor, shift: float) -> Tensor:
    return shift * sigma / (1 + (shift - 1) * sigma)


def flow_schedule(steps: int, shift: float = 3.0) -> tuple[Tensor, Tensor]:
    """(timesteps (steps,), sigmas (steps + 1,) ending at 0), fp32, as the reference's scheduler gives them."""
    sigma_min = _shift(torch.tensor(1.0 / TRAIN_TIMESTEPS, dtype=torch.float64), shift)
    sigmas = torch.linspace(1.0, float(sigma_min), steps, dtype=torch.float64)
    sigmas = _shift(sigmas, shift).float()
    return sigmas * TRAIN_TIMESTEPS, torch.cat([sigmas, torch.zeros(1)])


def euler_step(latents: Tensor, velocity: Tensor, sigma: Tensor | float, sigma_next: Tensor | float) -> Tensor:
    """One Euler step of the flow, in fp32: ``latents + (sigma_next - sigma) * velocity``."""
    return latents.float() + (float(sigma_next) - float(sigma)) * velocity.float()
