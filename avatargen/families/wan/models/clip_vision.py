"""The CLIP ViT-H/14 vision tower Wan2.1 I2V conditions on, with the reference's tensor names (``visual.*``).

Wan-Video/Wan2.1 ``wan/modules/clip.py`` (``VisionTransformer`` inside ``clip_xlm_roberta_vit_h_14``): 224 x 224
input, 14 x 14 patches (a conv without bias), a class token, learned positions, a pre-norm, 32 pre-norm blocks with
a fused ``to_qkv`` and exact GELU. Wan reads the states after block 31 of 32 (``use_31_block``): 257 tokens of 1280,
which the DiT's ``img_emb`` projects. The last block, ``post_norm`` and ``head`` are in the checkpoint and here (so
it loads strictly) but do not run.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from avatargen.families.wan.models.layers import FP32LayerNorm
from avatargen.families.wan.models.params import CLIPVisionParams

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


class SelfAttention(nn.Module):
    """Multi-head self-attention with one fused ``to_qkv`` projection (q, k, v in that order) and ``proj``."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.to_qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        """(B, L, dim) -> (B, L, dim)."""
        q, k, v = self.to_qkv(x).unflatten(-1, (3, self.heads, -1)).permute(2, 0, 3, 1, 4)  # (B, H, L, D) each
        return self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).flatten(2))


class AttentionBlock(nn.Module):
    """Pre-norm ViT block (``norm1``, ``attn``, ``norm2``, ``mlp.{0,2}``)."""

    def __init__(self, params: CLIPVisionParams) -> None:
        super().__init__()
        hidden = params.dim * params.mlp_ratio
        self.norm1 = FP32LayerNorm(params.dim, eps=params.eps)
        self.attn = SelfAttention(params.dim, params.num_heads)
        self.norm2 = FP32LayerNorm(params.dim, eps=params.eps)
        self.mlp = nn.Sequential(
            nn.Linear(params.dim, hidden), nn.GELU(), nn.Linear(hidden, params.dim), nn.Dropout(0.0)
        )

    def forward(self, x: Tensor) -> Tensor:
        """(B, L, dim) -> (B, L, dim)."""
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class CLIPVisionTower(nn.Module):
    """Images -> the token states Wan conditions on (see the module docstring)."""

    def __init__(self, params: CLIPVisionParams) -> None:
        super().__init__()
        params.validate()
        self.params = params
        gain = 1.0 / math.sqrt(params.dim)
        self.patch_embedding = nn.Conv2d(3, params.dim, params.patch_size, stride=params.patch_size, bias=False)
        self.cls_embedding = nn.Parameter(gain * torch.randn(1, 1, params.dim))
        self.pos_embedding = nn.Parameter(gain * torch.randn(1, params.tokens, params.dim))
        self.pre_norm = FP32LayerNorm(params.dim, eps=params.eps)
        self.transformer = nn.Sequential(*[AttentionBlock(params) for _ in range(params.num_layers)])
        self.post_norm = FP32LayerNorm(params.dim, eps=params.eps)  # in the checkpoint, not run
        self.head = nn.Parameter(gain * torch.randn(params.dim, params.out_dim))  # in the checkpoint, not run

    def reset_parameters(self) -> None:
        """The tower's own tensors (its children reset themselves): ``randn / sqrt(dim)`` as at construction."""
        for tensor in (self.cls_embedding, self.pos_embedding, self.head):
            nn.init.normal_(tensor, std=self.params.dim**-0.5)

    def block_stacks(self) -> list[nn.ModuleList]:
        """This model's repeated block stacks, in forward order (``models/structure.py``)."""
        return [self.transformer]

    def forward(self, pixels: Tensor) -> Tensor:
        """Normalised pixels (B, 3, image_size, image_size) -> (B, tokens, dim) after ``layers_used`` blocks."""
        x = self.patch_embedding(pixels).flatten(2).transpose(1, 2)  # (B, N, dim)
        x = torch.cat([self.cls_embedding.expand(x.shape[0], -1, -1).type_as(x), x], dim=1)  # (B, 1+N, dim)
        x = self.pre_norm(x + self.pos_embedding.type_as(x))
        for block in self.transformer[: self.params.layers_used]:
            x = block(x)
        return x


def clip_pixels(frames: Tensor, image_size: int) -> Tensor:
    """Frames in [-1, 1] (B, 3, H, W) -> CLIP input: bicubic to ``image_size`` square, [0, 1], mean/std normalised."""
    x = F.interpolate(frames.float(), size=(image_size, image_size), mode="bicubic", align_corners=False)
    mean = torch.tensor(CLIP_MEAN, device=x.device).view(1, 3, 1, 1)
    std = torch.tensor(CLIP_STD, device=x.device).view(1, 3, 1, 1)
    return (x * 0.5 + 0.5 - mean) / std
