"""FramePack's motion tokens (``frame_packer``): the last 19 motion latents packed at three scales, the nearest
frame at the DiT's patch size, the next two at 2x and the far sixteen at 4x (``FramePackMotioner``, 'padd' mode)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

BUCKETS = (1, 2, 16)  # nearest to farthest motion frames per scale
MOTION_LATENTS = sum(BUCKETS)


class FramePacker(nn.Module):
    """(B, 16, T, H, W) motion latents -> (B, N, dim) tokens: nearest frame, then the 2x, then the 4x ones."""

    def __init__(self, dim: int, channels: int = 16) -> None:
        super().__init__()
        self.proj = nn.Conv3d(channels, dim, kernel_size=(1, 2, 2), stride=(1, 2, 2))
        self.proj_2x = nn.Conv3d(channels, dim, kernel_size=(2, 4, 4), stride=(2, 4, 4))
        self.proj_4x = nn.Conv3d(channels, dim, kernel_size=(4, 8, 8), stride=(4, 8, 8))

    def forward(self, motion: Tensor) -> Tensor:
        """Fewer than 19 motion latents are zero-padded in front (the far end)."""
        b, c, t, h, w = motion.shape
        padded = motion.new_zeros(b, c, MOTION_LATENTS, h, w)
        keep = min(t, MOTION_LATENTS)
        if keep:
            padded[:, :, -keep:] = motion[:, :, -keep:]
        far, mid, near = padded.split(BUCKETS[::-1], dim=2)
        return torch.cat(
            [
                self.proj(near).flatten(2).transpose(1, 2),
                self.proj_2x(mid).flatten(2).transpose(1, 2),
                self.proj_4x(far).flatten(2).transpose(1, 2),
            ],
            dim=1,
        )
