"""Alibaba-Quark/LiveAvatar's own model code, imported from a checkout and run on a CPU in fp32 (the parity oracle).

The repository is not pip-installable and is never copied into this one: point ``AVATARGEN_REFERENCE`` at a checkout
of https://github.com/Alibaba-Quark/LiveAvatar. Its packages' ``__init__`` files import the whole training and
serving stack (peft, decord, torchvision, SAM2, ...), so the packages are registered empty and only the model's
modules are loaded from their files, as they are. What a CPU lacks is stood in for, each a plain substitute:

- ``torch.compile`` is off (``ENABLE_COMPILE=false``, the reference's own switch);
- its ``attention`` (cuDNN SDPA with a log-sum-exp, or flash-attn) and ``flash_attention`` (flash-attn only) by
  ``torch.nn.functional.scaled_dot_product_attention`` in fp32 (the reference's fallback casts to bf16);
- the DiT's RoPE table, built with ``.to("cuda")`` in ``__init__``, is built on the CPU: ``Tensor.to`` with a CUDA
  device returns the tensor unchanged while the model is constructed;
- one line of ``_forward_sink`` writes the 14B width (``torch.zeros([1,5120,nf,...])``, an empty tensor of no frames
  that only sets the width of the token list): it is read with ``self.dim`` in its place, the same for the 14B;
- each block rounds the residual to bf16 before ``norm3`` (``x.to(torch.bfloat16)``), also in fp32. That rounding
  turns 1e-7 differences of summation order into 4e-3 jumps of single elements, so over four steps no two fp32
  implementations agree to 1e-4: the dtype is read from a module variable, bf16 by default, and the recording
  switches it to fp32 for the multi-step checks (one single-step check keeps bf16).
"""

from __future__ import annotations

import importlib
import os
import sys
import types
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.nn.functional as F

ENV = "AVATARGEN_REFERENCE"
_PACKAGES = (
    "liveavatar",
    "liveavatar.models",
    "liveavatar.models.wan",
    "liveavatar.models.wan.wan_2_2",
    "liveavatar.models.wan.wan_2_2.modules",
    "liveavatar.models.wan.wan_2_2.modules.s2v",
    "liveavatar.models.wan.wan_2_2.distributed",
)


def reference_root() -> Path | None:
    """The LiveAvatar checkout named by ``AVATARGEN_REFERENCE``, or None."""
    value = os.environ.get(ENV)
    if not value:
        return None
    root = Path(value).expanduser()
    if not (root / "liveavatar" / "models" / "wan" / "causal_model_s2v.py").is_file():
        raise FileNotFoundError(f"{ENV}={value} is not a checkout of Alibaba-Quark/LiveAvatar")
    return root


def sdpa_fp32(q, k, v, *_args, **_kwargs):
    """(B, L, H, D) attention over every key in fp32 (the reference passes full key lengths on this path)."""
    out = F.scaled_dot_product_attention(q.transpose(1, 2).float(), k.transpose(1, 2).float(), v.transpose(1, 2).float())
    return out.transpose(1, 2).contiguous()


@contextmanager
def _cuda_to_is_identity():
    original = torch.Tensor.to

    def to(self, *args, **kwargs):
        if args and isinstance(args[0], str) and args[0].startswith("cuda"):
            return self
        return original(self, *args, **kwargs)

    torch.Tensor.to = to
    try:
        yield
    finally:
        torch.Tensor.to = original


def _import_patched(root: Path, name: str, *edits: tuple[str, str]) -> types.ModuleType:
    """Module ``name`` from its file with each text ``old`` read as ``new`` (each must occur exactly once)."""
    path = root / (name.replace(".", "/") + ".py")
    source = path.read_text()
    for old, new in edits:
        if source.count(old) != 1:
            raise RuntimeError(f"{path} changed: expected one {old!r}; re-check reference_code.py against it")
        source = source.replace(old, new)
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    exec(compile(source, str(path), "exec"), module.__dict__)
    return module


BF16_NORM3 = ("self.norm3(x.to(torch.bfloat16))", "self.norm3(x.to(BF16_NORM3_DTYPE))")


def load(root: Path) -> types.SimpleNamespace:
    """The reference's causal DiT module (``causal_model_s2v``) and its helpers, imported from ``root``; its
    ``BF16_NORM3_DTYPE`` (bf16, as written) is what x is rounded to before ``norm3`` (see ``set_norm3_rounding``)."""
    os.environ["ENABLE_COMPILE"] = "false"
    sys.path.insert(0, str(root))
    for name in _PACKAGES:
        package = types.ModuleType(name)
        package.__path__ = [str(root / name.replace(".", "/"))]
        sys.modules[name] = package
    attention = importlib.import_module("liveavatar.models.wan.wan_2_2.modules.attention")
    attention.attention = sdpa_fp32
    attention.flash_attention = sdpa_fp32
    model = importlib.import_module("liveavatar.models.wan.wan_2_2.modules.model")
    model.flash_attention = sdpa_fp32
    causal = _import_patched(
        root,
        "liveavatar.models.wan.causal_model_s2v",
        ("torch.zeros([1,5120,nf,height//2,width//2])", "torch.zeros([1,self.dim,nf,height//2,width//2])"),
        BF16_NORM3,
    )
    causal.BF16_NORM3_DTYPE = torch.bfloat16
    causal.attention = sdpa_fp32
    causal.flash_attention = sdpa_fp32
    return types.SimpleNamespace(causal=causal, model=model)


def build(ref: types.SimpleNamespace, **params) -> torch.nn.Module:
    """``CausalWanModel_S2V`` with Wan2.2-S2V-14B's switches (its config.json) at the sizes given."""
    with _cuda_to_is_identity():
        net = ref.causal.CausalWanModel_S2V(
            enable_adain=True,
            adain_mode="attn_norm",
            zero_init=True,
            zero_timestep=True,
            enable_motioner=False,
            add_last_motion=True,
            enable_tsm=False,
            enable_framepack=True,
            framepack_drop_mode="padd",
            model_type="s2v",
            **params,
        )
    return net.eval()
