"""The three attentions of a Wan2.1 block, with the reference's tensor names.

- :class:`SelfAttention` (``self_attn``): q/k RMS-normed over the full width, 3D RoPE on q and k; the one attention
  across the video tokens (the token span's ``attend``: under sequence parallelism the exchange of tokens for heads).
- :class:`CrossAttention` (``cross_attn``): queries attend to the text tokens and, for I2V, separately to the CLIP
  image tokens (``k_img`` / ``v_img``); the two results are summed before the output projection.
- :class:`AudioCrossAttention` (``audio_cross_attn``, InfiniteTalk/MultiTalk): the tokens of each latent frame
  attend only to that frame's audio tokens; with two speakers, through MultiTalk's label RoPE (``speakers.py``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from avatargen.families.wan.models.layers import RMSNorm, apply_rope
from avatargen.families.wan.models.speakers import rope_1d, speaker_key_positions
from avatargen.models.sequence import HeadSum, TokenSpan, attention, span_of_frames, whole_frames


class NormedQKVAttention(nn.Module):
    """What the Wan-family attentions share (Wan2.1's, and LiveAvatar's causal ones), under the reference's names: ``q``/``k``/``v``/``o`` projections of ``dim``
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


class SelfAttention(NormedQKVAttention):
    """Full self-attention over the video tokens with q/k RMS norm and 3D RoPE."""

    def forward(
        self, x: Tensor, rope: tuple[Tensor, Tensor], tokens: TokenSpan, per_heads: HeadSum | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """``x`` (B, L, dim) the span's tokens, ``rope`` (cos, sin) each (L, head_dim/2) at their positions ->
        (B, L, dim); their queries attend to the keys of the whole sequence (``tokens.attend``). With ``per_heads``
        (two-speaker routing), also its sum over all heads of the rotated queries and keys of the whole sequence
        (``tokens.attend_summing_heads``; under sequence parallelism each rank holds some heads), else None."""
        q = self.queries(x)  # (B, L, H, D)
        k, v = self.keys_values(x)  # (B, L, H, D) each
        q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        if per_heads is None:
            return self.o(tokens.attend(q, k, v)), None  # (B, L, dim)
        out, summed = tokens.attend_summing_heads(q, k, v, per_heads)  # (B, L, H*D), per_heads' shape
        return self.o(out), summed


class CrossAttention(NormedQKVAttention):
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
        out = attention(q, *self.keys_values(text))  # (B, L, dim)
        if self.with_image:
            if image is None:
                raise ValueError("this Wan DiT is image-to-video: pass the CLIP image tokens (clip_tokens)")
            k_img = self.split_heads(self.norm_k_img(self.k_img(image)))  # (B, Li, H, D)
            v_img = self.split_heads(self.v_img(image))  # (B, Li, H, D)
            out = out + attention(q, k_img, v_img)  # (B, L, dim)
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

    def forward(
        self,
        x: Tensor,
        audio: Tensor,
        frame_tokens: int | None = None,
        start: int = 0,
        positions: Tensor | None = None,
    ) -> Tensor:
        """``x`` (B, L, dim): tokens ``[start, start + L)`` of the F*S video tokens (S = ``frame_tokens`` per latent
        frame; None: all of them), ``audio`` (B, F, Na, audio_dim), ``positions`` (L,) the label positions of these
        tokens with two speakers or None -> (B, L, dim)."""
        b, f = audio.shape[:2]
        if frame_tokens is None or (start == 0 and x.shape[1] == f * frame_tokens):
            out = self._per_frame(x.reshape(b * f, -1, x.shape[-1]), audio, positions)  # (B*F, S, dim)
            return out.reshape(b, -1, x.shape[-1])  # (B, L, dim)
        # a span of the sequence (sequence parallelism): its frames, whole, then its own tokens of them
        grouped, first = whole_frames(x, start, frame_tokens)  # (B, n, S, dim)
        n = grouped.shape[1]
        if positions is not None:  # grouped as the tokens are (the padding's positions are never read back)
            positions = whole_frames(positions[None, :, None], start, frame_tokens)[0].flatten()  # (n*S,)
        frames = torch.arange(first, first + n, device=audio.device).clamp(max=f - 1)  # a padded tail repeats the last
        out = self._per_frame(grouped.flatten(0, 1), audio[:, frames], positions).unflatten(0, (b, n))  # (B, n, S, dim)
        return span_of_frames(out, start, x.shape[1])  # (B, L, dim)

    def _per_frame(self, x: Tensor, audio: Tensor, positions: Tensor | None) -> Tensor:
        """``x`` (B*F, S, dim) grouped by latent frame, ``audio`` (B, F, Na, audio_dim), ``positions`` (F*S,) or
        None -> (B*F, S, dim)."""
        q = self.q_linear(x).unflatten(-1, (self.heads, -1))  # (B*F, S, H, D)
        if positions is not None:
            q = rope_1d(q.reshape(audio.shape[0], -1, *q.shape[2:]), positions).reshape(q.shape)  # rotated per token
        k, v = self.kv_linear(audio.flatten(0, 1)).unflatten(-1, (2, self.heads, -1)).unbind(2)  # (B*F, Na, H, D)
        if positions is not None:
            k = rope_1d(k, speaker_key_positions(k.shape[1] // 2, k.device))
        return self.proj(attention(q, k, v))  # (B*F, S, dim)
