"""Our (= the original Wan2.1) tensor names -> diffusers' names, for the parity tests against diffusers.

Written from diffusers' ``scripts/convert_wan_to_diffusers.py``; the tests check it against diffusers' own
``convert_wan_*_to_diffusers`` converters as well. The InfiniteTalk adapter (``audio_proj.*``,
``blocks.N.audio_cross_attn.*``, ``blocks.N.norm_x.*``) has no diffusers counterpart: :func:`dit_to_diffusers`
drops it.
"""

from __future__ import annotations

import re

from torch import Tensor

# Whole-prefix renames outside the blocks.
_DIT_TOP = {
    "text_embedding.0.": "condition_embedder.text_embedder.linear_1.",
    "text_embedding.2.": "condition_embedder.text_embedder.linear_2.",
    "time_embedding.0.": "condition_embedder.time_embedder.linear_1.",
    "time_embedding.2.": "condition_embedder.time_embedder.linear_2.",
    "time_projection.1.": "condition_embedder.time_proj.",
    "img_emb.proj.0.": "condition_embedder.image_embedder.norm1.",
    "img_emb.proj.1.": "condition_embedder.image_embedder.ff.net.0.proj.",
    "img_emb.proj.3.": "condition_embedder.image_embedder.ff.net.2.",
    "img_emb.proj.4.": "condition_embedder.image_embedder.norm2.",
    "head.head.": "proj_out.",
    "head.modulation": "scale_shift_table",
    "patch_embedding.": "patch_embedding.",
}
# Renames inside ``blocks.N.``.
_DIT_BLOCK = {
    "modulation": "scale_shift_table",
    "norm3.": "norm2.",  # the affine norm before the cross-attention
    "ffn.0.": "ffn.net.0.proj.",
    "ffn.2.": "ffn.net.2.",
}
_ATTN = {"self_attn": "attn1", "cross_attn": "attn2"}
_ATTN_PART = {
    "q": "to_q", "k": "to_k", "v": "to_v", "o": "to_out.0", "norm_q": "norm_q", "norm_k": "norm_k",
    "k_img": "add_k_proj", "v_img": "add_v_proj", "norm_k_img": "norm_added_k",
}
_AUDIO = re.compile(r"^(audio_proj\.|blocks\.\d+\.(audio_cross_attn|norm_x)\.)")


def dit_key_to_diffusers(key: str) -> str | None:
    """One Wan DiT tensor name -> its diffusers ``WanTransformer3DModel`` name (None for the audio adapter)."""
    if _AUDIO.match(key):
        return None
    block = re.match(r"^blocks\.(\d+)\.(.*)$", key)
    if block is None:
        for prefix, new in _DIT_TOP.items():
            if key.startswith(prefix):
                return new + key[len(prefix):]
        raise KeyError(f"no diffusers name for {key}")
    index, rest = block.groups()
    attn = re.match(r"^(self_attn|cross_attn)\.([a-z_]+)\.(weight|bias)$", rest)
    if attn is not None:
        module, part, kind = attn.groups()
        return f"blocks.{index}.{_ATTN[module]}.{_ATTN_PART[part]}.{kind}"
    for prefix, new in _DIT_BLOCK.items():
        if rest.startswith(prefix):
            return f"blocks.{index}.{new}{rest[len(prefix):]}"
    raise KeyError(f"no diffusers name for {key}")


def dit_to_diffusers(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """A Wan DiT state dict -> a ``WanTransformer3DModel`` state dict (audio adapter dropped)."""
    out = {}
    for key, value in state.items():
        new = dit_key_to_diffusers(key)
        if new is not None:
            out[new] = value
    return out


# ---------------------------------------------------------------------------------------------------------------
# VAE (Wan2.1_VAE.pth -> AutoencoderKLWan), for the reference layout: 4 levels, 2 residual blocks per encoder level
# (3 per decoder level), so the decoder's flat ``upsamples`` list is [3 resnets, upsampler] x 3 + [3 resnets].
# ---------------------------------------------------------------------------------------------------------------
_RESIDUAL = {"residual.0.": "norm1.", "residual.2.": "conv1.", "residual.3.": "norm2.", "residual.6.": "conv2.",
             "shortcut.": "conv_shortcut."}  # fmt: skip
_VAE_TOP = {"conv1.": "quant_conv.", "conv2.": "post_quant_conv.", "encoder.conv1.": "encoder.conv_in.",
            "decoder.conv1.": "decoder.conv_in.", "encoder.head.0.": "encoder.norm_out.",
            "encoder.head.2.": "encoder.conv_out.", "decoder.head.0.": "decoder.norm_out.",
            "decoder.head.2.": "decoder.conv_out."}  # fmt: skip
_UPSAMPLES_PER_LEVEL = 4  # 3 resnets + 1 upsampler


def _residual(rest: str) -> str:
    for prefix, new in _RESIDUAL.items():
        if rest.startswith(prefix):
            return new + rest[len(prefix):]
    raise KeyError(rest)


def vae_key_to_diffusers(key: str) -> str:
    """One Wan VAE tensor name -> its diffusers ``AutoencoderKLWan`` name."""
    for prefix, new in _VAE_TOP.items():
        if key.startswith(prefix):
            return new + key[len(prefix):]
    middle = re.match(r"^(encoder|decoder)\.middle\.(\d)\.(.*)$", key)
    if middle is not None:
        side, index, rest = middle.groups()
        if index == "1":
            return f"{side}.mid_block.attentions.0.{rest}"
        return f"{side}.mid_block.resnets.{int(index) // 2}.{_residual(rest)}"
    down = re.match(r"^encoder\.downsamples\.(\d+)\.(.*)$", key)
    if down is not None:
        index, rest = down.groups()
        rest = rest if rest.startswith(("resample.", "time_conv.")) else _residual(rest)
        return f"encoder.down_blocks.{index}.{rest}"
    up = re.match(r"^decoder\.upsamples\.(\d+)\.(.*)$", key)
    if up is not None:
        level, position = divmod(int(up.group(1)), _UPSAMPLES_PER_LEVEL)
        rest = up.group(2)
        if position == _UPSAMPLES_PER_LEVEL - 1:
            return f"decoder.up_blocks.{level}.upsamplers.0.{rest}"
        return f"decoder.up_blocks.{level}.resnets.{position}.{_residual(rest)}"
    raise KeyError(f"no diffusers name for {key}")


def vae_to_diffusers(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """A Wan VAE state dict -> an ``AutoencoderKLWan`` state dict."""
    return {vae_key_to_diffusers(key): value for key, value in state.items()}
