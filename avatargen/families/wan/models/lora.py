"""LoRA files for the Wan DiT (e.g. the step-distilled ones InfiniteTalk users add), merged into the weights at load.

Formats, as InfiniteTalk's ``wan/wan_lora.py`` reads them (names under ``diffusion_model.``; files without that
prefix are accepted too): ``<name>.lora_down.weight`` / ``<name>.lora_up.weight`` (also spelled ``lora_A`` /
``lora_B``) add ``scale * up @ down`` to ``<name>.weight``; ``<name>.diff`` adds ``scale * diff`` to
``<name>.weight`` and ``<name>.diff_b`` to ``<name>.bias``. Like InfiniteTalk, the ``alpha`` entries some files carry
are not applied: ``scale`` (InfiniteTalk's ``--lora_scale``) is the whole factor.

:func:`merge_into` works one tensor at a time, so a loader can merge each weight as it reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

_PREFIX = "diffusion_model."
_LOW_RANK = (("lora_down.weight", "lora_up.weight"), ("lora_A.weight", "lora_B.weight"))


@dataclass(frozen=True)
class LoraDelta:
    """One target tensor's update: a low-rank pair (``down`` (r, in), ``up`` (out, r)) or a full ``diff``."""

    down: Tensor | None = None
    up: Tensor | None = None
    diff: Tensor | None = None

    def value(self, scale: float) -> Tensor:
        """The update in fp32: ``scale * up @ down`` or ``scale * diff``."""
        if self.diff is not None:
            return scale * self.diff.float()
        return scale * (self.up.float().flatten(1) @ self.down.float().flatten(1))


def parse_lora(tensors: dict[str, Tensor]) -> dict[str, LoraDelta]:
    """A LoRA file's tensors -> {target tensor name (the model's): its update}; ValueError on an unpaired entry."""
    deltas: dict[str, LoraDelta] = {}
    for key, value in tensors.items():
        name = key.removeprefix(_PREFIX)
        if name.endswith(".alpha"):
            continue
        for down_suffix, up_suffix in _LOW_RANK:
            if name.endswith(down_suffix):
                up_key = key[: -len(down_suffix)] + up_suffix
                if up_key not in tensors:
                    raise ValueError(f"LoRA entry {key} has no matching {up_suffix}")
                deltas[name[: -len(down_suffix)] + "weight"] = LoraDelta(down=value, up=tensors[up_key])
                break
            if name.endswith(up_suffix):
                if key[: -len(up_suffix)] + down_suffix not in tensors:
                    raise ValueError(f"LoRA entry {key} has no matching {down_suffix}")
                break
        else:
            if name.endswith(".diff_b"):
                deltas[name.removesuffix(".diff_b") + ".bias"] = LoraDelta(diff=value)
            elif name.endswith(".diff"):
                deltas[name.removesuffix(".diff") + ".weight"] = LoraDelta(diff=value)
            else:
                raise ValueError(f"LoRA entry {key} is not a lora_down/lora_up/lora_A/lora_B/diff/diff_b/alpha tensor")
    return deltas


def check_targets(deltas: dict[str, LoraDelta], shapes: dict[str, tuple[int, ...]]) -> None:
    """ValueError naming every update whose target the model lacks or whose shape does not fit it."""
    problems = []
    for name, delta in deltas.items():
        if name not in shapes:
            problems.append(f"{name}: not in the model")
            continue
        shape = shapes[name]
        if delta.diff is not None:
            got = tuple(delta.diff.shape)
        else:
            got = (delta.up.shape[0], *delta.down.shape[1:])
            if delta.up.shape[1] != delta.down.shape[0]:
                problems.append(f"{name}: up {tuple(delta.up.shape)} and down {tuple(delta.down.shape)} ranks differ")
                continue
        if got != shape:
            problems.append(f"{name}: the LoRA gives {got}, the model has {shape}")
    if problems:
        raise ValueError("LoRA does not fit this model: " + "; ".join(problems))


def merge_into(name: str, weight: Tensor, deltas: dict[str, LoraDelta], scale: float) -> Tensor:
    """``weight`` with its LoRA update added (computed in fp32, returned in ``weight``'s dtype); unchanged if none."""
    delta = deltas.get(name)
    if delta is None:
        return weight
    return (weight.float() + delta.value(scale).reshape(weight.shape)).to(weight.dtype)


def merge_state_dict(state: dict[str, Tensor], lora: dict[str, Tensor], scale: float) -> dict[str, Tensor]:
    """A state dict with a LoRA file merged in (targets checked first; every update must land)."""
    deltas = parse_lora(lora)
    check_targets(deltas, {k: tuple(v.shape) for k, v in state.items()})
    return {name: merge_into(name, weight, deltas, scale) for name, weight in state.items()}
