"""The three attentions of a Wan2.1 block, with the reference's tensor names.

- :class:`SelfAttention` (``self_attn``): q/k RMS-normed over the full width, 3D RoPE on q and k.
- :class:`CrossAttention` (``cross_attn``): queries attend to the text tokens and, for I2V, separately to the CLIP
  image tokens (``k_img`` / ``v_img``); the two results are summed before the output projection.
- :class:`AudioCrossAttention` (``audio_cross_attn``, InfiniteTalk/MultiTalk): the tokens of each latent frame
  attend only to that frame's audio tokens; with two speakers, through MultiTalk's label RoPE (``speakers.py``).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from avatargen.families.wan.models.layers import RMSNorm, apply_rope
from avatargen.families.wan.models.speakers import rope_1d, speaker_key_positions


def _attend(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """q (B, Lq, H, D), k/v (B, Lk, H, D) -> (B, Lq, H*D); softmax scale 1/sqrt(D), no mask."""
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))  # (B, H, Lq, D)
    return out.transpose(1, 2).flatten(2)  # (B, Lq, H*D)


class _NormedQKVAttention(nn.Module):
    """What both Wan attentions share, under the reference's names: ``q``/``k``/``v``/``o`` projections of ``dim``
    and RMS norms of the queries and keys over the full width (``norm_q``/``norm_k``), in the reference's order
    (state-dict keys and the random init's draws follow it)."""

    def __init__(self, dim: int, heads: int, eps: float) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim ({dim}) must be divisible by heads ({heads})")
        self.heads = heads
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.o = nn.Linear(dim, dim)
        self.norm_q = RMSNorm(dim, eps)
        self.norm_k = RMSNorm(dim, eps)

    def split_heads(self, x: Tensor) -> Tensor:
        """(B, L, dim) -> (B, L, H, D)."""
        return x.unflatten(-1, (self.heads, -1))

    def queries(self, x: Tensor) -> Tensor:
        """``x`` (B, L, dim) -> normed queries (B, L, H, D)."""
        return self.split_heads(self.norm_q(self.q(x)))

    def keys_values(self, context: Tensor) -> tuple[Tensor, Tensor]:
        """``context`` (B, Lk, dim) -> normed keys and values, (B, Lk, H, D) each."""
        return self.split_heads(self.norm_k(self.k(context))), self.split_heads(self.v(context))


class SelfAttention(_NormedQKVAttention):
    """Full self-attention over the video tokens with q/k RMS norm and 3D RoPE."""

    def forward(self, x: Tensor, rope: tuple[Tensor, Tensor], keep_qk: list | None = None) -> Tensor:
        """``x`` (B, L, dim), ``rope`` (cos, sin) each (L, head_dim/2) -> (B, L, dim). ``keep_qk`` receives the
        rotated queries and keys (two-speaker routing reads them)."""
        q = self.queries(x)  # (B, L, H, D)
        k, v = self.keys_values(x)  # (B, L, H, D) each
        q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        if keep_qk is not None:
            keep_qk.append((q, k))
        return self.o(_attend(q, k, v))  # (B, L, dim)


class CrossAttention(_NormedQKVAttention):
    """Cross-attention to the text tokens, plus (``with_image``) a second attention to the CLIP image tokens."""

    def __init__(self, dim: int, heads: int, eps: float, with_image: bool) -> None:
        super().__init__(dim, heads, eps)
        self.with_image = with_image
        if with_image:
            self.k_img = nn.Linear(dim, dim)
            self.v_img = nn.Linear(dim, dim)
            self.norm_k_img = RMSNorm(dim, eps)

    def forward(self, x: Tensor, text: Tensor, image: Tensor | None) -> Tensor:
        """``x`` (B, L, dim), ``text`` (B, Lt, dim), ``image`` (B, Li, dim) or None -> (B, L, dim)."""
        q = self.queries(x)  # (B, L, H, D)
        out = _attend(q, *self.keys_values(text))  # (B, L, dim)
        if self.with_image:
            if image is None:
                raise ValueError("this Wan DiT is image-to-video: pass the CLIP image tokens (clip_tokens)")
            k_img = self.split_heads(self.norm_k_img(self.k_img(image)))  # (B, Li, H, D)
            v_img = self.split_heads(self.v_img(image))  # (B, Li, H, D)
            out = out + _attend(q, k_img, v_img)  # (B, L, dim)
        return self.o(out)  # (B, L, dim)


class AudioCrossAttention(nn.Module):
    """InfiniteTalk's per-frame audio attention: latent frame ``f``'s tokens attend to its audio tokens.

    No q/k norm; ``kv_linear`` maps the audio tokens to keys and values at once (keys first). With two speakers
    (``positions`` given) the queries are rotated by each token's label position and the audio tokens (speaker 1's,
    then speaker 2's) by their speaker's (MultiTalk's label RoPE, ``speakers.py``).
    """

    def __init__(self, dim: int, heads: int, audio_dim: int) -> None:
        super().__init__()
        self.heads = heads
        self.q_linear = nn.Linear(dim, dim)
        self.kv_linear = nn.Linear(audio_dim, 2 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor, audio: Tensor, positions: Tensor | None = None) -> Tensor:
        """``x`` (B, F*S, dim) with S tokens per latent frame, ``audio`` (B, F, Na, audio_dim), ``positions`` (F*S,)
        label positions of two speakers' tokens or None -> (B, F*S, dim)."""
        b, f = audio.shape[:2]
        x = x.reshape(b * f, -1, x.shape[-1])  # (B*F, S, dim)
        q = self.q_linear(x).unflatten(-1, (self.heads, -1))  # (B*F, S, H, D)
        if positions is not None:
            q = rope_1d(q.reshape(b, -1, *q.shape[2:]), positions).reshape(q.shape)  # rotated per token
        k, v = self.kv_linear(audio.flatten(0, 1)).unflatten(-1, (2, self.heads, -1)).unbind(2)  # (B*F, Na, H, D)
        if positions is not None:
            k = rope_1d(k, speaker_key_positions(k.shape[1] // 2, k.device))
        out = self.proj(_attend(q, k, v))  # (B*F, S, dim)
        return out.reshape(b, -1, out.shape[-1])  # (B, F*S, dim)
