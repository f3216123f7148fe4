"""int8 linear layers: ``runtime.quantize`` (auto | none | int8), resolved once per render.

Dynamic quantisation: each ``nn.Linear``'s weights are rounded once to int8 (one scale per layer), and each call
quantises its input to 8 bits with a scale taken from that input (7 bits of range, so that CPUs without VNNI do not
saturate their 16-bit sums), multiplies in integers and returns float32. It runs through PyTorch's quantized CPU
engines: FBGEMM (torch's ``x86`` engine) or oneDNN (``onednn``, chosen when ``ONEDNN_MAX_CPU_ISA`` caps oneDNN's
instruction set, which FBGEMM would not keep to).

``auto`` (the default) leaves the layers in float: int8 runs only where ``runtime.quantize=int8`` asks for it. int8
rounds every layer's input to 8 bits, so a change in the last bit of a number before a layer (another thread count,
kernel or CPU) can round one of its inputs the other way: a render's frames then move by up to ~200 grey levels at the
lips, where float layers move them by at most 2 (docs/equal-frames.md). No timing decides it: a timed
probe's verdict differs from run to run on a busy CPU, and a render's frames must not depend on how long something
took.

PyTorch has deprecated the quantized tensors these engines take (they still run in the torch this package pins);
where they are gone, ``int8`` says so.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from functools import lru_cache

import torch
from torch import Tensor, nn

from avatargen.errors import ConfigError
from avatargen.runtime.probe import best_time_s
from avatargen.threads import torch_threads

PROBE_SHAPE = (256, 192, 768)  # (rows, in, out): the A2V MLP's first layer over a quarter of a window's frame tokens
PROBE_REPEATS = 4  # best of
REDUCE_RANGE = True  # 7-bit inputs: no saturation in AVX2's 16-bit multiply-adds


@dataclass(frozen=True)
class Quantization:
    """Whether the DiTs' linear layers run in int8, on which engine, and why (reported by ``--json``)."""

    int8: bool
    reason: str  # "forced", or why ``auto`` left the layers in float
    engine: str = ""

    def describe(self) -> str:
        """One line for the report: ``int8 (forced)``, ``none (auto: int8 only where runtime.quantize=int8 asks)``."""
        return f"{'int8' if self.int8 else 'none'} ({self.reason})"


OFF = Quantization(False, "not asked")
AUTO = Quantization(False, "auto: int8 only where runtime.quantize=int8 asks")


class Int8Linear(nn.Module):
    """``nn.Linear`` with int8 weights and dynamically quantised int8 inputs: (..., in) -> (..., out) float32."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        weight = linear.weight.detach().float()  # (out, in)
        scale = max(float(weight.abs().max()) / 127.0, 1e-12)
        bias = linear.bias.detach().float() if linear.bias is not None else None
        with warnings.catch_warnings():  # the quantized tensor's deprecation (see the module docstring)
            warnings.simplefilter("ignore")
            quantized = torch.quantize_per_tensor(weight, scale, 0, torch.qint8)
        self.packed = torch.ops.quantized.linear_prepack(quantized, bias)
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: Tensor) -> Tensor:
        """(..., in) -> (..., out)."""
        flat = x.reshape(-1, self.in_features).float()  # (N, in)
        out = torch.ops.quantized.linear_dynamic(flat, self.packed, REDUCE_RANGE)  # (N, out)
        return out.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"


def quantize_linears(model: nn.Module, engine: str) -> int:
    """Every ``nn.Linear`` under ``model`` replaced by an :class:`Int8Linear` of its weights packed for ``engine``,
    in place; returns how many. (The packed weights keep their engine: later calls run on it whatever torch's
    current engine is.)"""
    previous, count = torch.backends.quantized.engine, 0
    torch.backends.quantized.engine = engine
    try:
        for module in list(model.modules()):
            for name, child in list(module.named_children()):
                if isinstance(child, nn.Linear):
                    setattr(module, name, Int8Linear(child))
                    count += 1
    finally:
        torch.backends.quantized.engine = previous
    return count


def engine_for_this_cpu() -> str | None:
    """The quantized engine int8 runs on here: oneDNN when ``ONEDNN_MAX_CPU_ISA`` caps its instruction set (FBGEMM
    ignores the cap), else torch's default for this CPU; None where this torch has no quantized CPU engine."""
    try:
        engines = torch.backends.quantized.supported_engines
        has_ops = hasattr(torch.ops.quantized, "linear_dynamic") and hasattr(torch.ops.quantized, "linear_prepack")
    except (AttributeError, RuntimeError):
        return None
    if not has_ops:
        return None
    if os.environ.get("ONEDNN_MAX_CPU_ISA") and "onednn" in engines:
        return "onednn"
    for engine in ("x86", "fbgemm", "onednn", "qnnpack"):
        if engine in engines:
            return engine
    return None


@lru_cache(maxsize=4)
def probe_int8_speedup(engine: str) -> float:
    """float32 time / int8 time of an A2V-shaped linear layer on one core with ``engine`` (> 1: int8 is faster), for
    ``avatargen doctor``: no render decides anything from it. Measured once per process and engine (~10 ms); the
    thread count and the engine are restored afterwards."""
    rows, inputs, outputs = PROBE_SHAPE
    generator = torch.Generator().manual_seed(0)
    layer = nn.Linear(inputs, outputs)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(outputs, inputs, generator=generator) * inputs**-0.5)
    x = torch.randn(rows, inputs, generator=generator)  # (rows, in)
    previous = torch.backends.quantized.engine
    try:
        torch.backends.quantized.engine = engine
        with torch_threads(1), torch.inference_mode():  # times a core, not the scheduler
            int8 = Int8Linear(layer)  # packed for ``engine``
            return best_time_s(lambda: layer(x), PROBE_REPEATS) / best_time_s(lambda: int8(x), PROBE_REPEATS)
    finally:
        torch.backends.quantized.engine = previous


def choose_quantization(setting: str, device: torch.device, dtype: torch.dtype, single_process: bool,
                        resident: bool) -> Quantization:  # fmt: skip
    """Resolve ``runtime.quantize`` for a render computing in ``dtype`` on ``device`` (``single_process``: no ranks
    split it; ``resident``: no offload): float layers for ``auto`` and ``none``; ``int8`` where it can run, else
    ConfigError naming why. A function of the setting and the machine only (see the module docstring)."""
    if setting == "none":
        return Quantization(False, "forced")
    if setting == "auto":
        return AUTO
    if setting != "int8":
        raise ValueError(f"unknown runtime.quantize '{setting}'; valid: auto, none, int8")
    engine = engine_for_this_cpu() if device.type == "cpu" else None
    blocker = None
    if device.type != "cpu":
        blocker = f"the device is {device.type}: int8 linears run on a CPU only"
    elif dtype != torch.float32:
        blocker = f"{str(dtype).removeprefix('torch.')} compute"
    elif not single_process or not resident:
        blocker = "int8 linears run in one process with the weights resident (no offload, no ranks)"
    elif engine is None:
        blocker = "this torch has no quantized CPU engine"
    if blocker is not None:
        raise ConfigError(f"runtime.quantize=int8 cannot run here ({blocker}); use runtime.quantize=auto or none")
    return Quantization(True, "forced", engine)
