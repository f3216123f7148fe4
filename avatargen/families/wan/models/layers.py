"""Layers shared by the Wan2.1 DiT: norms computed in fp32, the sinusoidal timestep embedding and 3D RoPE.

Nothing here owns a buffer: tables (RoPE angles, sinusoid frequencies) are computed on the input's device at
call time, so a model built on the meta device needs no re-initialisation after its weights are loaded.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class RMSNorm(nn.Module):
    """RMS norm over the last dimension, computed in fp32, with a learned scale (``weight``), no mean subtraction and
    no bias. Its output is in the input's dtype (Wan's norms), or in the scale's (``in_weight_dtype``: T5's)."""

    def __init__(self, dim: int, eps: float, in_weight_dtype: bool = False) -> None:
        super().__init__()
        self.eps = eps
        self.in_weight_dtype = in_weight_dtype
        self.weight = nn.Parameter(torch.ones(dim))

    def reset_parameters(self) -> None:
        """Unit scale (the meta-device build's random init calls this; see ``models/structure.py``)."""
        nn.init.ones_(self.weight)

    def forward(self, x: Tensor) -> Tensor:
        """(..., dim) -> (..., dim), in ``x``'s dtype (or the scale's)."""
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        if self.in_weight_dtype:
            return self.weight * normed.type_as(self.weight)
        return normed.type_as(x) * self.weight


class FP32LayerNorm(nn.LayerNorm):
    """LayerNorm computed in fp32 and returned in the input's dtype (weights, when affine, upcast too)."""

    def forward(self, x: Tensor) -> Tensor:
        """(..., dim) -> (..., dim)."""
        weight = None if self.weight is None else self.weight.float()
        bias = None if self.bias is None else self.bias.float()
        return F.layer_norm(x.float(), self.normalized_shape, weight, bias, self.eps).type_as(x)


def timestep_sinusoid(timesteps: Tensor, dim: int) -> Tensor:
    """Wan's timestep features: ``(B,)`` timesteps in [0, 1000) -> ``(B, dim)`` fp32, [cos | sin] halves.

    Computed in float64 like the reference (the arguments reach ~1000 rad, where fp32 loses ~1e-4).
    """
    if dim % 2:
        raise ValueError(f"timestep embedding dim must be even, got {dim}")
    half = dim // 2
    positions = timesteps.to(torch.float64)  # (B,)
    freqs = torch.pow(10000.0, -torch.arange(half, dtype=torch.float64, device=timesteps.device) / half)  # (half,)
    args = positions[:, None] * freqs[None, :]  # (B, half)
    return torch.cat([torch.cos(args), torch.sin(args)], dim=1).float()  # (B, dim)


def rope_split(head_dim: int) -> tuple[int, int, int]:
    """How Wan splits a head's channels between time, height and width (each even; time gets the remainder)."""
    if head_dim % 2:
        raise ValueError(f"RoPE needs an even head dim, got {head_dim}")
    spatial = 2 * (head_dim // 6)
    return head_dim - 2 * spatial, spatial, spatial


def rope_angles(grid: tuple[int, int, int], head_dim: int, device: torch.device, theta: float = 10000.0) -> Tensor:
    """3D RoPE angles for a (frames, height, width) token grid, row-major: ``(F*H*W, head_dim / 2)`` float64.

    Each of the three axes rotates its own slice of channel pairs with the standard 1D frequencies of that
    slice's width (``rope_split``), so a token's rotation is (time, row, column) in that order.
    """
    tables = []
    for axis, (size, width) in enumerate(zip(grid, rope_split(head_dim))):
        inv_freq = 1.0 / theta ** (torch.arange(0, width, 2, dtype=torch.float64, device=device) / width)  # (w/2,)
        angles = torch.arange(size, dtype=torch.float64, device=device)[:, None] * inv_freq  # (size, w/2)
        shape = [1, 1, 1, width // 2]
        shape[axis] = size
        tables.append(angles.view(shape).expand(*grid, width // 2))  # (F, H, W, w/2)
    return torch.cat(tables, dim=-1).reshape(-1, head_dim // 2)  # (F*H*W, head_dim/2)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate interleaved channel pairs ``(x[2i], x[2i+1])``: ``x`` (B, L, heads, head_dim); cos/sin (L, head_dim/2).

    The rotation runs in fp32 (the reference uses float64 complex numbers; fp32 stays within 1e-6 of it).
    """
    pairs = x.float().unflatten(-1, (-1, 2))  # (B, L, H, D/2, 2)
    real, imag = pairs.unbind(-1)  # (B, L, H, D/2) each
    cos = cos[None, :, None, :]  # (1, L, 1, D/2)
    sin = sin[None, :, None, :]
    rotated = torch.stack([real * cos - imag * sin, real * sin + imag * cos], dim=-1)  # (B, L, H, D/2, 2)
    return rotated.flatten(-2).type_as(x)  # (B, L, H, D)
