"""LiveAvatar's LoRA (``liveavatar.safetensors``), merged into the base weights as the reference merges it (peft's
``merge_and_unload``): ``W += (alpha / r) * B @ A`` for every ``<module>.lora_A.default.weight`` /
``<module>.lora_B.default.weight`` pair, names with or without peft's ``base_model.model.`` prefix. A tensor that is
not a LoRA pair replaces the base tensor of its name (the reference loads the file with ``strict=False`` over the
peft model, so such a tensor overrides the base). The reference's training config: rank 128, alpha 64."""

from __future__ import annotations

from torch import Tensor

PEFT_PREFIX = "base_model.model."
DEFAULT_ALPHA = 64.0


def parse_peft(lora: dict[str, Tensor]) -> tuple[dict[str, tuple[Tensor, Tensor]], dict[str, Tensor]]:
    """A peft file -> ({target weight name: (A (r, in), B (out, r))}, {name: replacing tensor}); ValueError on an
    unpaired half."""
    pairs: dict[str, tuple[Tensor, Tensor]] = {}
    replaced: dict[str, Tensor] = {}
    for key, value in lora.items():
        name = key.removeprefix(PEFT_PREFIX)
        if ".lora_A." in name:
            module, adapter = name.split(".lora_A.")
            b_key = key.replace(".lora_A.", ".lora_B.")
            if b_key not in lora:
                raise ValueError(f"LoRA entry {key} has no matching lora_B")
            pairs[f"{module}.weight"] = (value, lora[b_key])
        elif ".lora_B." in name:
            if key.replace(".lora_B.", ".lora_A.") not in lora:
                raise ValueError(f"LoRA entry {key} has no matching lora_A")
        else:
            replaced[name.replace(".base_layer.", ".")] = value
    return pairs, replaced


def merge_peft_lora(state: dict[str, Tensor], lora: dict[str, Tensor], alpha: float = DEFAULT_ALPHA) -> dict[str, Tensor]:
    """``state`` with the LoRA merged (each update computed in fp32, stored in the base tensor's dtype); ValueError
    naming every target the model lacks or whose shape differs."""
    pairs, replaced = parse_peft(lora)
    problems = [f"{name}: not in the model" for name in [*pairs, *replaced] if name not in state]
    for name, (a, b) in pairs.items():
        if name in state and (b.shape[0], a.shape[1]) != tuple(state[name].shape):
            problems.append(f"{name}: the LoRA gives {(b.shape[0], a.shape[1])}, the model has {tuple(state[name].shape)}")
    for name, value in replaced.items():
        if name in state and value.shape != state[name].shape:
            problems.append(f"{name}: the file has {tuple(value.shape)}, the model {tuple(state[name].shape)}")
    if problems:
        raise ValueError("LoRA does not fit this model: " + "; ".join(problems))
    merged = dict(state)
    for name, value in replaced.items():
        merged[name] = value.to(state[name].dtype)
    for name, (a, b) in pairs.items():
        scale = alpha / a.shape[0]
        merged[name] = (merged[name].float() + scale * (b.float() @ a.float())).to(state[name].dtype)
    return merged
