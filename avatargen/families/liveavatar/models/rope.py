"""LiveAvatar's 3D RoPE: each token group (the block's frames, the reference, the packed motion) gets its own
(time, row, column) positions, sampled as the reference samples them (``s2v_utils.rope_precompute``).

The reference builds its tables in complex half precision (``view_as_complex`` of an fp16 tensor): every cos and sin
is rounded to fp16 before it multiplies the float64 queries and keys. The trained weights saw those tables, so they
are kept: :func:`group_rope` rounds the same way (a float64 table would move a toy block's velocity, of magnitude
~4, by up to 8.4e-5).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from avatargen.families.wan.models.layers import rope_split

THETA = 10000.0
REFERENCE_FRAME = 30  # the reference image's time position (its group starts at frame 30 + the rollout)


@dataclass(frozen=True)
class TokenGroup:
    """A box of tokens on the position grid: ``start`` and ``end`` corners (time, row, column) and the ``extent``
    its positions are spread over (the reference's three grid_sizes tensors: start, end, range)."""

    start: tuple[int, int, int]
    end: tuple[int, int, int]
    extent: tuple[int, int, int]

    def shifted(self, frames: int) -> TokenGroup:
        """The group moved ``frames`` later in time (``rollout_grid_sizes``)."""
        return TokenGroup((self.start[0] + frames, *self.start[1:]), (self.end[0] + frames, *self.end[1:]), self.extent)

    @property
    def size(self) -> int:
        """Tokens in the group."""
        return int(np.prod([e - s for s, e in zip(self.start, self.end)]))


def _sampled(start: int, extent: int, count: int) -> list[int]:
    """``count`` integer positions spread from ``start`` over ``extent`` (numpy's linspace, truncated, as the
    reference; a negative start counts back from its absolute value)."""
    if start >= 0:
        return np.linspace(start, extent + start - 1, count).astype(int).tolist()
    return np.linspace(-start, -extent - start + 1, count).astype(int).tolist()


def _angles(positions: list[int], width: int) -> Tensor:
    """(len(positions), width/2) float64 angles of one axis."""
    inv_freq = 1.0 / torch.pow(THETA, torch.arange(0, width, 2, dtype=torch.float64) / width)
    return torch.tensor(positions, dtype=torch.float64)[:, None] * inv_freq[None, :]


def group_rope(group: TokenGroup, head_dim: int) -> tuple[Tensor, Tensor]:
    """(cos, sin) of the group's tokens, row-major over (time, row, column): (size, head_dim/2) float64 each,
    rounded to fp16 as the reference's complex-half table. A group before time 0 (the packed motion) rotates the
    other way in time (the reference's ``conj``)."""
    counts = [e - s for s, e in zip(group.start, group.end)]
    widths = rope_split(head_dim)
    axes = []
    for axis, (start, extent, count, width) in enumerate(zip(group.start, group.extent, counts, widths)):
        angles = _angles(_sampled(start, extent, count), width)  # (count, w/2)
        if axis == 0 and start < 0:
            angles = -angles
        shape = [1, 1, 1, width // 2]
        shape[axis] = count
        axes.append(angles.view(shape).expand(*counts, width // 2))
    angles = torch.cat(axes, dim=-1).reshape(-1, head_dim // 2)  # (size, head_dim/2)
    return angles.cos().half().double(), angles.sin().half().double()


def groups_rope(groups: list[TokenGroup], head_dim: int) -> tuple[Tensor, Tensor]:
    """(cos, sin) of several groups' tokens, one after the other."""
    tables = [group_rope(g, head_dim) for g in groups if g.size > 0]
    return torch.cat([t[0] for t in tables]), torch.cat([t[1] for t in tables])


def apply_rope(x: Tensor, rope: tuple[Tensor, Tensor]) -> Tensor:
    """Rotate interleaved channel pairs in float64: ``x`` (B, L, H, D), cos/sin (L, D/2) -> (B, L, H, D) fp32."""
    cos, sin = (t.to(x.device)[None, :, None, :] for t in rope)  # (1, L, 1, D/2)
    real, imag = x.double().unflatten(-1, (-1, 2)).unbind(-1)  # (B, L, H, D/2) each
    rotated = torch.stack([real * cos - imag * sin, real * sin + imag * cos], dim=-1)
    return rotated.flatten(-2).float()


def noisy_group(first_frame: int, frames: int, rows: int, cols: int) -> TokenGroup:
    """The block's own tokens: ``frames`` latent frames from ``first_frame``, a (rows, cols) token grid each."""
    return TokenGroup((first_frame, 0, 0), (first_frame + frames, rows, cols), (frames, rows, cols))


def reference_group(rollout: int, rows: int, cols: int) -> TokenGroup:
    """The reference image's tokens at frame 30 + ``rollout``."""
    start = REFERENCE_FRAME + rollout
    return TokenGroup((start, 0, 0), (start + 1, rows, cols), (1, rows, cols))


def motion_groups(rows: int, cols: int, buckets: tuple[int, int, int] = (1, 2, 16)) -> list[TokenGroup]:
    """The frame packer's three token groups (nearest motion frame at full size, the next two at 2x, the far 16 at
    4x), before time 0 and spread over the full grid (``FramePackMotioner``)."""
    near, mid, far = buckets
    return [
        TokenGroup((-near, 0, 0), (0, rows, cols), (near, rows, cols)),
        TokenGroup((-(near + mid), 0, 0), (-(near + mid) + mid // 2, rows // 2, cols // 2), (mid, rows, cols)),
        TokenGroup(
            (-(near + mid + far), 0, 0), (-(near + mid + far) + far // 4, rows // 4, cols // 4), (far, rows, cols)
        ),
    ]
