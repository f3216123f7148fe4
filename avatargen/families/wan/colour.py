"""Colour correction as InfiniteTalk and MultiTalk do it (``match_and_blend_colors``, wan/utils/multitalk_utils.py):
every decoded frame's CIE Lab mean and standard deviation, per channel, moved to the reference image's, then blended
with the frame by ``strength`` (1.0 by default there: ``--color_correction_strength``).

Lab is sRGB under the D65 white of a 2-degree observer, with the constants scikit-image's ``rgb2lab`` / ``lab2rgb``
use (the reference calls them); computed here in float64 with torch, one frame's statistics at a time, so a frame's
correction depends on that frame and the reference only (a resumed render is bit-exact).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

XYZ_FROM_RGB = ((0.412453, 0.357580, 0.180423), (0.212671, 0.715160, 0.072169), (0.019334, 0.119193, 0.950227))
D65_WHITE = (0.95047, 1.0, 1.08883)


def _matrix(device: torch.device) -> Tensor:
    return torch.tensor(XYZ_FROM_RGB, dtype=torch.float64, device=device)  # (3, 3)


def rgb_to_lab(rgb: Tensor) -> Tensor:
    """sRGB in [0, 1], channels last (..., 3) -> CIE Lab (..., 3), float64."""
    x = rgb.double()
    linear = torch.where(x > 0.04045, ((x + 0.055) / 1.055) ** 2.4, x / 12.92)
    xyz = linear @ _matrix(x.device).T / torch.tensor(D65_WHITE, dtype=torch.float64, device=x.device)
    f = torch.where(xyz > 0.008856, torch.pow(xyz, 1.0 / 3.0), 7.787 * xyz + 16.0 / 116.0)
    fx, fy, fz = f.unbind(-1)
    return torch.stack([116.0 * fy - 16.0, 500.0 * (fx - fy), 200.0 * (fy - fz)], dim=-1)


def lab_to_rgb(lab: Tensor) -> Tensor:
    """CIE Lab (..., 3) -> sRGB (..., 3) in [0, 1], float64 (a negative Z is taken as 0 and the result clipped)."""
    lab = lab.double()
    y = (lab[..., 0] + 16.0) / 116.0
    x = lab[..., 1] / 500.0 + y
    z = (y - lab[..., 2] / 200.0).clamp(min=0.0)
    f = torch.stack([x, y, z], dim=-1)
    xyz = torch.where(f > 0.2068966, f**3, (f - 16.0 / 116.0) / 7.787)
    xyz = xyz * torch.tensor(D65_WHITE, dtype=torch.float64, device=lab.device)
    linear = xyz @ torch.linalg.inv(_matrix(lab.device)).T
    rgb = torch.where(linear > 0.0031308, 1.055 * linear.clamp(min=0.0) ** (1 / 2.4) - 0.055, 12.92 * linear)
    return rgb.clamp(0.0, 1.0)


@dataclass(frozen=True)
class ColourTarget:
    """The reference image's Lab statistics that every frame is moved to."""

    mean: Tensor  # (3,) float64
    std: Tensor  # (3,) float64

    @classmethod
    def of(cls, image: Tensor) -> "ColourTarget":
        """``image`` (1, 3, 1, H, W) or (1, 3, H, W) in [-1, 1]."""
        lab = rgb_to_lab(_to_unit(image.reshape(3, *image.shape[-2:])).permute(1, 2, 0)).reshape(-1, 3)  # (HW, 3)
        return cls(lab.mean(0), lab.std(0, unbiased=False))


def _to_unit(x: Tensor) -> Tensor:
    return ((x.double() + 1.0) / 2.0).clamp(0.0, 1.0)


def match_and_blend(video: Tensor, target: ColourTarget, strength: float) -> Tensor:
    """``video`` (1, 3, T, H, W) in [-1, 1] with each frame's Lab mean and deviation moved to ``target``'s, blended
    with the frame by ``strength`` in [0, 1]; returned in [-1, 1] in ``video``'s dtype."""
    if strength == 0.0:
        return video
    frames = _to_unit(video[0]).permute(1, 2, 3, 0)  # (T, H, W, 3) in [0, 1]
    out = torch.empty_like(frames)
    for t in range(frames.shape[0]):  # one frame's Lab at a time
        lab = rgb_to_lab(frames[t])  # (H, W, 3)
        flat = lab.reshape(-1, 3)
        mean, std = flat.mean(0), flat.std(0, unbiased=False)  # (3,) each
        flat_std = std == 0  # a flat channel takes the target's mean (the reference's choice)
        scale = torch.where(flat_std, torch.zeros_like(std), target.std / torch.where(flat_std, torch.ones_like(std), std))
        corrected = lab_to_rgb((lab - mean) * scale + target.mean)  # (H, W, 3) in [0, 1]
        out[t] = (1.0 - strength) * frames[t] + strength * corrected
    return (out.permute(3, 0, 1, 2)[None] * 2.0 - 1.0).to(video.dtype)  # (1, 3, T, H, W)
