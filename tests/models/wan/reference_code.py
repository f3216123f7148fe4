"""MeiGen-AI's own code (InfiniteTalk, which carries MultiTalk's modules), run on a CPU from a checkout for parity.

The reference repository is not pip-installable and is never copied into this one: point ``AVATARGEN_REFERENCE`` (or
``--reference``) at a checkout of https://github.com/MeiGen-AI/InfiniteTalk. Its modules are loaded from their files
as they are, with only what a CPU lacks stood in for, each a plain substitute of a GPU kernel or a distributed
helper that the single-process path never calls:

- ``xfuser`` (sequence-parallel groups: not called in one process) and ``xformers.ops.memory_efficient_attention``
  (replaced by ``torch.nn.functional.scaled_dot_product_attention`` in fp32, the same maths);
- ``flash_attention`` (asserts CUDA and casts to bf16) by fp32 SDPA with the same key lengths;
- ``torch_gc`` (empties the CUDA cache) does nothing;
- ``torch.compile`` is switched off (``torch._dynamo.config.disable``): the decorated function runs eagerly;
- torchvision's compiled ops are not loaded (only its Python ``center_crop`` is used); it must be importable
  (any recent build), as must diffusers, transformers, pyloudnorm, scikit-image, imageio and soundfile.

Functions of scripts that import the whole pipeline (``generate_infinitetalk.py``, ``wan/multitalk.py``) are taken
out of their file by name (``function_from``) and run in a namespace holding the modules they use.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import sys
import types
from pathlib import Path

import torch
import torch.nn.functional as F

ENV = "AVATARGEN_REFERENCE"


def reference_root() -> Path | None:
    """The InfiniteTalk checkout named by ``AVATARGEN_REFERENCE``, or None."""
    value = os.environ.get(ENV)
    if not value:
        return None
    root = Path(value).expanduser()
    if not (root / "wan" / "modules" / "multitalk_model.py").is_file():
        raise FileNotFoundError(f"{ENV}={value} is not a checkout of MeiGen-AI/InfiniteTalk (no wan/modules/multitalk_model.py)")
    return root


def _sdpa_nhd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """(B, L, H, D) attention in fp32, softmax scale 1/sqrt(D)."""
    out = F.scaled_dot_product_attention(q.transpose(1, 2).float(), k.transpose(1, 2).float(), v.transpose(1, 2).float())
    return out.transpose(1, 2)


def flash_attention_fp32(q, k, v, q_lens=None, k_lens=None, **_unused):
    """The reference's ``flash_attention`` on a CPU: the same key lengths, fp32 instead of bf16."""
    out = torch.zeros(q.shape[0], q.shape[1], q.shape[2], v.shape[3])
    for i in range(q.shape[0]):
        n = int(k_lens[i]) if k_lens is not None else k.shape[1]
        out[i : i + 1] = _sdpa_nhd(q[i : i + 1], k[i : i + 1, :n], v[i : i + 1, :n])
    return out.type_as(q)


def prepare() -> None:
    """What every parity run needs before the reference or transformers is imported (idempotent; changes this
    process only, so it runs when a parity function is called, never at import)."""
    # torchvision's compiled ops may not match this torch (transformers imports it too); its Python transforms do
    # not need them
    sys.modules.setdefault("torchvision._meta_registrations", types.ModuleType("torchvision._meta_registrations"))
    torch._dynamo.config.disable = True
    _install_stubs()


def _install_stubs() -> None:
    try:  # before the stubs: diffusers probes for a real xformers when it is imported
        import diffusers.models.modeling_utils  # noqa: F401
    except ImportError:
        pass  # only the DiT's module needs it (the audio path runs with an older transformers, see the docstring)

    if "xfuser" not in sys.modules:
        xfuser, core, distributed = (types.ModuleType(n) for n in ("xfuser", "xfuser.core", "xfuser.core.distributed"))

        def not_distributed(*_args, **_kwargs):
            raise RuntimeError("sequence parallelism is not part of a one-process parity run")

        for name in ("get_sequence_parallel_rank", "get_sequence_parallel_world_size", "get_sp_group",
                     "init_distributed_environment", "initialize_model_parallel"):  # fmt: skip
            setattr(distributed, name, not_distributed)
        xfuser.core, core.distributed = core, distributed
        sys.modules.update({"xfuser": xfuser, "xfuser.core": core, "xfuser.core.distributed": distributed})
    if "xformers" not in sys.modules:
        xformers, ops = types.ModuleType("xformers"), types.ModuleType("xformers.ops")

        def memory_efficient_attention(q, k, v, attn_bias=None, op=None):
            if attn_bias is not None:
                raise RuntimeError("attention biases are sequence-parallel only")
            return _sdpa_nhd(q, k, v).type_as(q)

        ops.memory_efficient_attention = memory_efficient_attention
        ops.fmha = types.SimpleNamespace(attn_bias=types.SimpleNamespace(BlockDiagonalMask=None))
        xformers.ops = ops
        sys.modules.update({"xformers": xformers, "xformers.ops": ops})


def _package(name: str, path: Path) -> None:
    if name not in sys.modules:
        module = types.ModuleType(name)
        module.__path__ = [str(path)]
        sys.modules[name] = module


def load_module(root: Path, dotted: str) -> types.ModuleType:
    """Import ``dotted`` (e.g. ``wan.modules.multitalk_model``) from the checkout, its packages' ``__init__`` not
    run (they import the whole pipeline)."""
    prepare()
    parts = dotted.split(".")
    prefix = "avatargen_reference"
    _package(prefix, root)
    for package in ("wan", "wan.modules", "wan.utils", "src", "src.audio_analysis"):  # never their __init__
        _package(f"{prefix}.{package}", root.joinpath(*package.split(".")))
    for package in ("src", "src.audio_analysis"):  # src/audio_analysis/wav2vec2.py imports itself absolutely
        _package(package, root.joinpath(*package.split(".")))
    name = ".".join([prefix, *parts])
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, root.joinpath(*parts[:-1], parts[-1] + ".py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def multitalk_model(root: Path) -> types.ModuleType:
    """``wan/modules/multitalk_model.py`` with fp32 attention."""
    multitalk_utils(root)
    module = load_module(root, "wan.modules.multitalk_model")
    module.flash_attention = flash_attention_fp32
    module.USE_SAGEATTN = False
    return module


def multitalk_utils(root: Path) -> types.ModuleType:
    """``wan/utils/multitalk_utils.py`` (its CUDA cache helper a no-op)."""
    module = load_module(root, "wan.utils.multitalk_utils")
    module.torch_gc = lambda: None
    return module


def function_from(path: Path, name: str, namespace: dict) -> object:
    """The function ``name`` defined at the top level of ``path``, run in ``namespace`` (its decorators dropped)."""
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            node.decorator_list = []
            scope = dict(namespace)
            exec(compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec"), scope)
            return scope[name]
    raise LookupError(f"no function {name} in {path}")
