"""A request's reference conditioning, kept per machine: a render of a picture rendered before skips encoding it.

Encoding the reference (the VAE over the model's square, the text encoder over the prompt) is 0.09-0.13 s of a
render's time to first frame on a 2-core CPU, the first call of the VAE's convolutions included. What it gives
depends only on the inputs, the weights, the code and how the CPU computes (dtype, threads, kernels), so
``cached(key, compute)`` keeps ``compute()``'s tensors in the cache folder (``avatargen.face.hog_cache.cache_folder``,
``references/``) under a digest of ``key``, which names all of those (``conditioning_key``). A render from the cache
is the same render bit for bit: the tensors are stored exactly (safetensors) and read back only when their key and
the SHA-256 of their bytes match. Only a single-process CPU render keeps them: a sharded module encodes on every
rank at once, and a GPU encodes in milliseconds. Files are written to a temporary name and renamed into place; an
unwritable folder only costs the encode; at most ``MAX_ENTRIES`` are kept (the least recently used go first).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import Tensor

from avatargen.face.hog_cache import cache_folder, prune_least_recently_used
from avatargen.modules import Module, tensors_digest

FORMAT = 1
MAX_ENTRIES = 200  # ~50 kB each for the bundled model
# Environment variables that choose the CPU kernels (and so the last bits of a float result) besides torch's own.
KERNEL_SETTINGS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR")


def references_folder() -> Path:
    return cache_folder() / "references"


def conditioning_key(picture: np.ndarray, prompt: str, modules: Iterable[Module], settings: Any,
                     code: Iterable[ModuleType]) -> dict[str, Any] | None:  # fmt: skip
    """What the conditioning of ``picture`` (S, S, 3) uint8 and ``prompt`` computed by ``modules`` depends on:
    their weights and compute dtype, ``settings`` (any JSON-able value: the modules' config sections), the source of
    the Python modules ``code`` and the CPU's kernels and threads. None where it is not kept (see the module
    docstring)."""
    modules = list(modules)
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    if distributed or any(module.device.type != "cpu" for module in modules):
        return None
    pixels = np.ascontiguousarray(picture)
    source = hashlib.sha256()
    for module in code:
        source.update(Path(module.__file__).read_bytes())
    return {
        "picture": hashlib.sha256(repr(pixels.shape).encode() + pixels.tobytes()).hexdigest(),
        "prompt": prompt,
        "weights": {module.name: module.weights_digest() for module in modules},
        "dtype": {module.name: str(module.compute_dtype) for module in modules},
        "settings": json.loads(json.dumps(settings, sort_keys=True, default=str)),
        "code": source.hexdigest(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "kernels": [torch.backends.cpu.get_cpu_capability(), *(os.environ.get(name) for name in KERNEL_SETTINGS)],
    }


def cached(key: dict[str, Any] | None, compute: Callable[[], dict[str, Tensor]]) -> dict[str, Tensor]:
    """``compute()`` (named CPU tensors), read from the cache folder when it was kept under ``key`` before, else
    computed and kept (``key`` None: computed, not kept)."""
    if key is None:
        return compute()
    text = json.dumps({"format": FORMAT, **key}, sort_keys=True)
    path = references_folder() / f"{hashlib.sha256(text.encode()).hexdigest()}.safetensors"
    kept = _read(path, text)
    if kept is not None:
        return kept
    tensors = compute()
    _write(path, text, tensors)
    return tensors


def _read(path: Path, key: str) -> dict[str, Tensor] | None:
    """The tensors kept in ``path`` when it is whole and was made under ``key``; marked as used (its modification
    time: the least recently used go first past ``MAX_ENTRIES``)."""
    try:
        with safe_open(str(path), framework="pt") as file:
            metadata = file.metadata() or {}
            tensors = {name: file.get_tensor(name) for name in file.keys()}
    except Exception:  # noqa: BLE001 - missing, cut short or not a safetensors file: computed again
        return None
    if metadata.get("key") != key or metadata.get("sha256") != tensors_digest(sorted(tensors.items())):
        return None
    with contextlib.suppress(OSError):
        os.utime(path)
    return tensors


def _write(path: Path, key: str, tensors: dict[str, Tensor]) -> None:
    """Keep ``tensors`` in ``path`` under ``key`` (atomically), then drop the least recently used past
    ``MAX_ENTRIES``. A folder that cannot be written is skipped."""
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=".reference-", suffix=".safetensors")
        os.close(handle)
        try:
            contiguous = {name: tensor.detach().cpu().contiguous() for name, tensor in tensors.items()}
            save_file(contiguous, temporary, metadata={"key": key, "sha256": tensors_digest(sorted(contiguous.items()))})
            os.replace(temporary, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        prune_least_recently_used(folder, "*.safetensors", MAX_ENTRIES)
    except OSError:
        pass
