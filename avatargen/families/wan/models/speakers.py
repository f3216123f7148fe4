"""MultiTalk's two-speaker routing ("label RoPE"), as MeiGen-AI's ``wan/modules/multitalk_model.py``,
``wan/modules/attention.py`` (``SingleStreamMutiAttention``) and ``wan/utils/multitalk_utils.py`` compute it.

Each block's self-attention says, for every video token, how much it attends to each speaker's region of the first
latent frame (the reference): the softmax of its query against the first frame's keys, summed over the region's
tokens, divided by their count, averaged over heads (``attention_map``; ``head_sum`` before the division). A token
belongs to the region it attends to most (speaker 1, speaker 2 or the background), and gets a 1D rotary position
inside that region's range: speaker 1 [0, 4], speaker 2 [20, 24], scaled by how strongly it attends there;
background 12 (``label_positions``). The audio cross-attention rotates its queries by those positions and each
speaker's audio tokens by the centre of the speaker's range (2 and 22), so a token hears the speaker whose region it
belongs to.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from avatargen.families.wan.models.layers import apply_rope

CLASS_RANGE, CLASS_INTERVAL = 24, 4  # the reference's label RoPE ranges
SPEAKER_RANGES = ((0.0, float(CLASS_INTERVAL)), (float(CLASS_RANGE - CLASS_INTERVAL), float(CLASS_RANGE)))
BACKGROUND_POSITION = float(CLASS_RANGE // 2)
SPEAKERS = len(SPEAKER_RANGES)


def token_masks(person_masks: Tensor, grid: tuple[int, int]) -> Tensor:
    """(speakers + 1, h, w) masks on the latent grid (speakers, then the background) -> (speakers + 1, H' * W') 0/1
    floats on the DiT's token grid (nearest, as the reference resizes them)."""
    tokens = F.interpolate(person_masks[None].float(), size=grid, mode="nearest")[0] > 0  # (S+1, H', W')
    return tokens.flatten(1).float()


@dataclass(frozen=True)
class SpeakerRouting:
    """What the blocks of one forward need to route two speakers: the region masks on the first frame's tokens."""

    masks: Tensor  # (speakers + 1, frame_tokens) 0/1

    @property
    def frame_tokens(self) -> int:
        return self.masks.shape[1]

    def attention_map(self, q: Tensor, k: Tensor) -> Tensor:
        """Rotated self-attention queries and keys (B, L, H, D) -> (regions, L): the mean over heads of each token's
        attention to each region of the first latent frame."""
        return self.head_sum(q, k) / q.shape[2]

    def head_sum(self, q: Tensor, k: Tensor) -> Tensor:
        """Rotated self-attention queries and keys of the whole sequence for some heads (B, L, h, D) -> (regions, L):
        the sum over those heads of each token's attention to each region of the first latent frame (computed in
        fp32, one head at a time). Sums over disjoint sets of heads add up to the sum over all of them (sequence
        parallelism computes each rank's heads and all-reduces)."""
        if q.shape[0] != 1:
            raise ValueError("two-speaker routing runs one sample at a time (batch 1), as the reference")
        scale = q.shape[-1] ** -0.5
        masks = self.masks.to(q.device)  # (R, S)
        counts = masks.sum(1).clamp(min=1.0)  # (R,): an empty region attends to nothing (the reference divides by 0)
        total = torch.zeros(masks.shape[0], q.shape[1], device=q.device)  # (R, L)
        for head in range(q.shape[2]):
            logits = (q[0, :, head].float() * scale) @ k[0, : self.frame_tokens, head].float().T  # (L, S)
            total += (logits.softmax(-1) @ masks.T).T / counts[:, None]  # (R, L)
        return total

    @staticmethod
    def label_positions(attention: Tensor) -> Tensor:
        """(regions, L) attention map -> (L,) 1D RoPE positions: each speaker's map min-max scaled into its range,
        the background's fixed, each token taking the region it attends to most."""
        low, high = attention.min(1).values, attention.max(1).values  # (R,)
        positions = [
            (attention[s] - low[s]) / (high[s] - low[s] + 1e-8) * (end - start) + start
            for s, (start, end) in enumerate(SPEAKER_RANGES)
        ]
        positions.append(torch.full_like(attention[0], BACKGROUND_POSITION))
        return torch.stack(positions, dim=1)[torch.arange(attention.shape[1]), attention.argmax(dim=0)]  # (L,)


def rope_1d(x: Tensor, positions: Tensor) -> Tensor:
    """1D rotary embedding over the whole head at fp32 positions: ``x`` (B, L, H, D), ``positions`` (L,)."""
    d = x.shape[-1]
    inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2, device=x.device)[: d // 2].float() / d))  # (D/2,)
    angles = positions.float()[:, None] * inv_freq[None, :]  # (L, D/2)
    return apply_rope(x, angles.cos(), angles.sin())


def speaker_key_positions(tokens_per_speaker: int, device: torch.device) -> Tensor:
    """(speakers * tokens,) positions of the audio tokens: each speaker's at the centre of its range."""
    centres = [(start + end) / 2 for start, end in SPEAKER_RANGES]
    return torch.tensor(centres, device=device).repeat_interleave(tokens_per_speaker)
