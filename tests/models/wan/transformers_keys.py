"""Original Wan2.1 tensor names -> transformers' names, for the parity tests against transformers.

umT5 (``models_t5_umt5-xxl-enc-bf16.pth`` -> ``UMT5EncoderModel``): T5's gated feed-forward is ``wi_0`` (the GELU
gate), ``wi_1`` (the linear branch), ``wo``; the per-block relative-position bias sits in each block's
``SelfAttention``.
"""

from __future__ import annotations

import re

from torch import Tensor

_UMT5_BLOCK = {
    "norm1.weight": "layer.0.layer_norm.weight",
    "attn.q.weight": "layer.0.SelfAttention.q.weight",
    "attn.k.weight": "layer.0.SelfAttention.k.weight",
    "attn.v.weight": "layer.0.SelfAttention.v.weight",
    "attn.o.weight": "layer.0.SelfAttention.o.weight",
    "pos_embedding.embedding.weight": "layer.0.SelfAttention.relative_attention_bias.weight",
    "norm2.weight": "layer.1.layer_norm.weight",
    "ffn.gate.0.weight": "layer.1.DenseReluDense.wi_0.weight",
    "ffn.fc1.weight": "layer.1.DenseReluDense.wi_1.weight",
    "ffn.fc2.weight": "layer.1.DenseReluDense.wo.weight",
}


def umt5_key_to_transformers(key: str) -> list[str]:
    """One umT5 encoder tensor name -> its ``UMT5EncoderModel`` name(s) (the embedding is stored twice there)."""
    if key == "token_embedding.weight":
        return ["shared.weight", "encoder.embed_tokens.weight"]
    if key == "norm.weight":
        return ["encoder.final_layer_norm.weight"]
    block = re.match(r"^blocks\.(\d+)\.(.*)$", key)
    if block is None or block.group(2) not in _UMT5_BLOCK:
        raise KeyError(f"no transformers name for {key}")
    return [f"encoder.block.{block.group(1)}.{_UMT5_BLOCK[block.group(2)]}"]


def umt5_to_transformers(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """A umT5 encoder state dict (original names) -> a ``UMT5EncoderModel`` state dict."""
    return {new: value for key, value in state.items() for new in umt5_key_to_transformers(key)}


def clip_vision_to_transformers(state: dict[str, Tensor], prefix: str = "") -> dict[str, Tensor]:
    """The CLIP vision tower (original ``visual.*`` names, prefix removed) -> a ``CLIPVisionModel`` state dict.

    The fused ``to_qkv`` splits into ``q_proj``, ``k_proj``, ``v_proj``; the class token and the positions lose their
    leading singleton dimensions; the contrastive ``head`` has no counterpart in ``CLIPVisionModel`` and is dropped.
    ``prefix``: ``"vision_model."`` for transformers 4, whose ``CLIPVisionModel`` nests the tower one level down.
    """
    out = {
        "embeddings.patch_embedding.weight": state["patch_embedding.weight"],
        "embeddings.class_embedding": state["cls_embedding"].reshape(-1),
        "embeddings.position_embedding.weight": state["pos_embedding"][0],
    }
    for ours, theirs in (("pre_norm", "pre_layrnorm"), ("post_norm", "post_layernorm")):
        for kind in ("weight", "bias"):
            out[f"{theirs}.{kind}"] = state[f"{ours}.{kind}"]
    blocks = sorted({int(key.split(".")[1]) for key in state if key.startswith("transformer.")})
    for i in blocks:
        ours, theirs = f"transformer.{i}", f"encoder.layers.{i}"
        for kind in ("weight", "bias"):
            q, k, v = state[f"{ours}.attn.to_qkv.{kind}"].chunk(3, dim=0)
            out |= {f"{theirs}.self_attn.q_proj.{kind}": q, f"{theirs}.self_attn.k_proj.{kind}": k,
                    f"{theirs}.self_attn.v_proj.{kind}": v}  # fmt: skip
            for a, b in (("attn.proj", "self_attn.out_proj"), ("norm1", "layer_norm1"), ("norm2", "layer_norm2"),
                         ("mlp.0", "mlp.fc1"), ("mlp.2", "mlp.fc2")):  # fmt: skip
                out[f"{theirs}.{b}.{kind}"] = state[f"{ours}.{a}.{kind}"]
    return {prefix + key: value for key, value in out.items()}
