"""One-step super-resolution DiT in latent space: low-res latents -> high-res latents, per frame.

Two token streams, each with the reference image's tokens in context:
  * main: the upsampled low-res latent in coarse patches (``patch_size``) over the whole frame;
  * face: finer patches (``face_patch_size``) over ``face_box`` only, for extra capacity where identity and lip
    detail live; it also reads the main stream's features at its positions.
Both predict residuals through zero-initialised heads, so an untrained model is exactly the bilinear upsampler.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from avatargen.families.tiny.models.layers import TransformerBlock, init_linear_xavier, init_sincos_2d, patchify, unpatchify
from avatargen.families.tiny.params import SRDiTParams


def _validate(p: SRDiTParams) -> None:
    if len(p.face_box) != 4:
        raise ValueError(f"face_box must have 4 values (x0, y0, x1, y1), got {p.face_box}")
    x0, y0, x1, y1 = p.face_box
    if not (0.0 <= x0 < x1 <= 1.0 and 0.0 <= y0 < y1 <= 1.0):
        raise ValueError(f"face_box must satisfy 0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1, got {p.face_box}")
    if p.high_size % p.patch_size:
        raise ValueError(f"high_size ({p.high_size}) must be a multiple of patch_size ({p.patch_size})")
    if p.patch_size % p.face_patch_size:
        raise ValueError(f"patch_size ({p.patch_size}) must be a multiple of face_patch_size ({p.face_patch_size})")
    if p.low_size > p.high_size:
        raise ValueError(f"low_size ({p.low_size}) must be <= high_size ({p.high_size})")


def face_region(face_box: list[float], size: int, align: int) -> tuple[int, int, int, int]:
    """``face_box`` on a ``size`` x ``size`` grid, grown outward to multiples of ``align``: (y0, y1, x0, x1)."""
    x0, y0, x1, y1 = face_box

    def lo(v: float) -> int:
        return math.floor(v * size / align) * align

    def hi(v: float) -> int:
        return min(math.ceil(v * size / align) * align, size)

    return lo(y0), hi(y1), lo(x0), hi(x1)


def frame_features(blocks: nn.ModuleList, x: Tensor, n_ref: int) -> Tensor:
    """``blocks`` over [reference; frame] tokens (B, n_ref + N, D) -> the frame tokens' features (B, N, D). Nothing
    reads the reference tokens' outputs, so the last block computes the frame tokens only (as keys and values the
    reference tokens still count)."""
    for block in blocks[:-1]:
        x = block(x)  # (B, n_ref + N, D)
    return blocks[-1](x, keep_from=n_ref) if len(blocks) else x[:, n_ref:]


class SRDiT(nn.Module):
    """Low-res latents (B, C, h, w) + reference high-res latents (B, C, H, W) -> high-res latents (B, C, H, W)."""

    def __init__(self, params: SRDiTParams) -> None:
        super().__init__()
        _validate(params)
        p = self.params = params
        grid, fine_grid = p.high_size // p.patch_size, p.high_size // p.face_patch_size
        self.face_box = face_region(p.face_box, p.high_size, p.face_patch_size)  # (y0, y1, x0, x1) latent pixels

        # Main stream.
        self.embed = nn.Linear(p.latent_channels * p.patch_size**2, p.dim)
        self.pos = nn.Parameter(torch.empty(1, grid * grid, p.dim))  # (1, N, D), learned; sincos init below
        self.ref_type = nn.Parameter(torch.zeros(p.dim))
        self.blocks = nn.ModuleList(TransformerBlock(p.dim, p.heads, p.mlp_ratio) for _ in range(p.depth))
        self.head_norm = nn.LayerNorm(p.dim)
        self.head = nn.Linear(p.dim, p.latent_channels * p.patch_size**2)

        # Face stream.
        self.face_embed = nn.Linear(p.latent_channels * p.face_patch_size**2, p.dim)
        self.face_pos = nn.Parameter(torch.empty(1, fine_grid * fine_grid, p.dim))  # (1, Nf_full, D), sincos init
        self.face_ref_type = nn.Parameter(torch.zeros(p.dim))
        self.face_context = nn.Linear(p.dim, p.dim)  # main-stream features -> face tokens
        self.face_blocks = nn.ModuleList(TransformerBlock(p.dim, p.heads, p.mlp_ratio) for _ in range(p.face_depth))
        self.face_head_norm = nn.LayerNorm(p.dim)
        self.face_head = nn.Linear(p.dim, p.latent_channels * p.face_patch_size**2)

        self.init_weights()

    def block_stacks(self) -> list[nn.ModuleList]:
        """The main stream's blocks, then the face stream's, in forward order (avatargen/models/structure.py)."""
        return [self.blocks, self.face_blocks]

    def init_weights(self) -> None:
        """The model's own init on top of each layer's default (also run after a meta-device build)."""
        p = self.params
        grid, fine_grid = p.high_size // p.patch_size, p.high_size // p.face_patch_size
        init_sincos_2d(self.pos, grid, grid)
        init_sincos_2d(self.face_pos, fine_grid, fine_grid)
        init_linear_xavier(self)
        nn.init.normal_(self.ref_type, std=0.02)
        nn.init.normal_(self.face_ref_type, std=0.02)
        for head in (self.head, self.face_head):  # zero residual heads: untrained model == upsampler
            nn.init.zeros_(head.weight)
            nn.init.zeros_(head.bias)

    def forward(self, low: Tensor, ref_high: Tensor) -> Tensor:
        """``low``: (B, C, h, w) low-res latents of B independent frames; ``ref_high``: (B, C, H, W) reference
        latents at the target size -> (B, C, H, W) = bilinear upsample of ``low`` + predicted residual."""
        p = self.params
        height, width = ref_high.shape[-2:]
        if (height, width) != (p.high_size, p.high_size):
            raise ValueError(f"ref_high grid {(height, width)} != high_size {p.high_size}")
        up = F.interpolate(low, size=(height, width), mode="bilinear", align_corners=False)  # (B, C, H, W)

        # Main stream over the whole frame.
        tokens = self.embed(patchify(up, p.patch_size)) + self.pos  # (B, N, D)
        ref = self.embed(patchify(ref_high, p.patch_size)) + self.pos + self.ref_type  # (B, N, D)
        x = torch.cat([ref, tokens], dim=1)  # (B, 2N, D)
        feats = frame_features(self.blocks, x, ref.shape[1])  # (B, N, D)
        residual = self.head(self.head_norm(feats))  # (B, N, C P P)
        out = up + unpatchify(residual, p.patch_size, height, width)  # (B, C, H, W)

        # Face stream over the box, at the finer patch size.
        y0, y1, x0, x1 = self.face_box
        fp, ratio = p.face_patch_size, p.patch_size // p.face_patch_size
        fine_rows = slice(y0 // fp, y1 // fp)
        fine_cols = slice(x0 // fp, x1 // fp)
        fine_w = width // fp
        face_pos = rearrange(self.face_pos, "o (gh gw) d -> o gh gw d", gw=fine_w)[:, fine_rows, fine_cols]
        face_pos = rearrange(face_pos, "o gh gw d -> o (gh gw) d")  # (1, Nf, D)
        # Each fine patch lies inside one coarse patch: broadcast that patch's main-stream feature to it.
        context = rearrange(feats, "b (gh gw) d -> b d gh gw", gw=width // p.patch_size)  # (B, D, H/P, W/P)
        context = context.repeat_interleave(ratio, dim=2).repeat_interleave(ratio, dim=3)  # (B, D, H/fp, W/fp)
        context = rearrange(context[:, :, fine_rows, fine_cols], "b d gh gw -> b (gh gw) d")  # (B, Nf, D)

        face = self.face_embed(patchify(out[:, :, y0:y1, x0:x1], fp))  # (B, Nf, D)
        face = face + face_pos + self.face_context(context)  # (B, Nf, D)
        face_ref = self.face_embed(patchify(ref_high[:, :, y0:y1, x0:x1], fp)) + face_pos + self.face_ref_type
        fx = torch.cat([face_ref, face], dim=1)  # (B, 2Nf, D)
        face_feats = frame_features(self.face_blocks, fx, face_ref.shape[1])  # (B, Nf, D)
        face_res = self.face_head(self.face_head_norm(face_feats))  # (B, Nf, C fp fp)
        face_res = unpatchify(face_res, fp, y1 - y0, x1 - x0)  # (B, C, y1-y0, x1-x0)
        return out + F.pad(face_res, (x0, width - x1, y0, height - y1))  # (B, C, H, W)
