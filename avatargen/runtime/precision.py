"""The compute precision of a render: ``runtime.dtype`` (auto | float32 | bfloat16), resolved once per render.

``auto`` asks the machine. On CUDA it is bfloat16 where the GPU supports it. On a CPU it is bfloat16 only when both
hold: the CPU says it has native bf16 (``avx512_bf16`` or ``amx_bf16`` in /proc/cpuinfo) and a short timed probe
(the same matmul in bf16 and fp32, interleaved, best of several) finds bf16 at least ``MIN_SPEEDUP`` times faster. A
CPU that emulates bf16 runs it several times slower than fp32, so without both, ``auto`` is float32.

The probe runs once per machine, not per render: the median of three probes is saved in the cache folder under a name
drawn from the CPU's model and flags, torch's version and oneDNN's ISA cap (``saved_cpu_bf16_speedup``), and every
later process on the machine decides from it. A probe timed on a busy CPU can land on either side of the threshold (1 try in ~2,000
under the test suite's load on an EPYC Zen 4 whose ratio is 2.1), and a render's dtype decides its frames and its
``--resume`` fingerprint: a render stopped in bf16 must not be refused as another config when it resumes.

A bfloat16 render runs the stage forwards under ``torch.autocast``: weights stay float32, the matmuls and convolutions
run in bf16, and each stage hands float32 tensors on (``Module.active``), so the rolling state, the resume
checkpoints and the decoded frames' quantisation stay float32. Renders are bit-exact for a given dtype and thread
count; bf16 frames differ from fp32 ones by the tolerance measured in docs/performance.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

import torch

from avatargen.runtime.quantize import OFF, Quantization
from avatargen.threads import torch_threads

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
MIN_SPEEDUP = 1.3  # bf16 must beat fp32 by this much in the probe, or auto keeps float32
PROBE_SIZE = 384  # the probe's square matmul: ~0.11 GFLOP, ~1 ms per repeat in fp32 on one core
PROBE_REPEATS = 5  # best of: a repeat the scheduler interrupted does not count (the CUDA probe)
CPU_PROBE_ROUNDS = 12  # rounds of one fp32 and one bf16 matmul, best of each: both see the same load
SAVED_PROBES = 3  # a machine's saved ratio is the median of this many probes (~75 ms, once per machine)
ONEDNN_ISA_CAPS = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")  # a cap below AVX512_CORE_BF16 emulates bf16


@dataclass(frozen=True)
class Precision:
    """The dtype a render computes in, and why it was chosen (reported by ``--json``); ``quantization``: whether
    its linear layers run in int8 (``runtime.quantize``, avatargen/runtime/quantize.py)."""

    dtype: torch.dtype
    reason: str  # e.g. "forced", "probe: bf16 3.9x fp32", "no native bf16 (avx512_bf16/amx_bf16)"
    quantization: Quantization = OFF

    @property
    def signature(self) -> str:
        """What changes the frames: ``float32``, ``bfloat16``, or ``float32+int8``."""
        return self.name + ("+int8" if self.quantization.int8 else "")

    @property
    def name(self) -> str:
        """``float32`` or ``bfloat16``."""
        return str(self.dtype).removeprefix("torch.")

    def describe(self) -> str:
        """One line for the report: ``bfloat16 (probe: bf16 3.9x fp32)``."""
        return f"{self.name} ({self.reason})"


def _cpuinfo_value(key: str, cpuinfo: Path = Path("/proc/cpuinfo")) -> str | None:
    """The value of the first ``key : value`` line of /proc/cpuinfo (None where there is none or it is not readable,
    e.g. not Linux)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    return next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith(key) and ":" in line),
                None)  # fmt: skip


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The CPU's feature flags (empty where /proc/cpuinfo is not readable, e.g. not Linux)."""
    return frozenset((_cpuinfo_value("flags", cpuinfo) or "").split())


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's ``model name`` from /proc/cpuinfo ('' where there is none)."""
    return _cpuinfo_value("model name", cpuinfo) or ""


CPU_CLASSES = {  # the classes the README's speed table lists, newest first: (flags it needs, what it is)
    "amx": (("amx_bf16",), "AMX: native bf16 matrix units (Xeon 4th gen and later)"),
    "avx512": (("avx512f",), "AVX-512 without AMX"),
    "avx2": (("avx2", "fma"), "AVX2 + FMA (most laptops and cloud VMs)"),
}


def cpu_class(flags: frozenset[str] | None = None) -> str:
    """This CPU's speed class (``CPU_CLASSES``: ``amx``, ``avx512``, ``avx2``), or ``other`` (older x86, or a CPU
    whose flags /proc/cpuinfo does not list)."""
    flags = cpu_flags() if flags is None else flags
    return next((name for name, (needed, _) in CPU_CLASSES.items() if set(needed) <= flags), "other")


def _matmul_operands(dtype: torch.dtype, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    a = torch.randn(size, size, generator=torch.Generator().manual_seed(0)).to(dtype)  # (size, size)
    b = torch.randn(size, size, generator=torch.Generator().manual_seed(1)).to(dtype)  # (size, size)
    return a, b


def time_cpu_speedup(dtype: torch.dtype, size: int = PROBE_SIZE, rounds: int = CPU_PROBE_ROUNDS) -> float:
    """fp32 time / ``dtype`` time of the same matmul on one core of this CPU (> 1: ``dtype`` is faster), timed now.
    The two run in turns, so that a burst of load slows both, and each keeps its fastest call; ~20-40 ms where the
    CPU runs ``dtype`` natively. The thread count is restored afterwards."""
    operands = (_matmul_operands(torch.float32, size), _matmul_operands(dtype, size))
    best = [float("inf"), float("inf")]  # fp32, dtype
    with torch_threads(1), torch.inference_mode():  # times a core, not the scheduler
        for a, b in operands:
            torch.mm(a, b)  # warm-up: kernel choice, first touches
        for _ in range(rounds):
            for index, (a, b) in enumerate(operands):
                started = time.perf_counter()
                torch.mm(a, b)
                best[index] = min(best[index], time.perf_counter() - started)
    fp32, other = best
    return fp32 / other


@lru_cache(maxsize=4)
def probe_cpu_speedup(dtype: torch.dtype) -> float:
    """``time_cpu_speedup`` once per process and dtype (what ``avatargen doctor`` prints)."""
    return time_cpu_speedup(dtype)


def saved_probe_path() -> Path:
    """Where this machine's bf16 probe is kept: named by a digest of what decides its answer (the CPU's model and
    flags, torch's version, oneDNN's ISA cap), so a VM moved to another host, a new torch or a cap probes again."""
    from avatargen.face.hog_cache import cache_folder  # torch-free, stdlib only

    identity = json.dumps([cpu_model(), sorted(cpu_flags()), torch.__version__, PROBE_SIZE,
                           [os.environ.get(name, "") for name in ONEDNN_ISA_CAPS]])  # fmt: skip
    digest = hashlib.sha256(identity.encode()).hexdigest()[:16]
    return cache_folder() / f"cpu-bf16-probe-{digest}.json"


@lru_cache(maxsize=1)
def saved_cpu_bf16_speedup() -> float:
    """This machine's bf16 probe: read from ``saved_probe_path()``, else measured now (the median of
    ``SAVED_PROBES`` probes: it stays for the machine's life, so one try that load pushed across the threshold must
    not decide it) and saved there (written whole, then renamed; a cache folder that cannot be written only means the
    next process probes again)."""
    path = saved_probe_path()
    try:
        ratio = float(json.loads(path.read_text())["bf16_vs_fp32"])
        if ratio > 0:
            return ratio
    except (OSError, ValueError, KeyError, TypeError):
        pass  # not probed on this machine yet, or a damaged file: probe again
    probes = [time_cpu_speedup(torch.bfloat16) for _ in range(SAVED_PROBES)]
    ratio = statistics.median(probes)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        scratch = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        scratch.write_text(json.dumps({"bf16_vs_fp32": ratio, "probes": probes, "cpu": cpu_model(),
                                       "torch": torch.__version__}) + "\n")  # fmt: skip
        os.replace(scratch, path)
    except OSError:
        pass
    return ratio


@lru_cache(maxsize=16)
def probe_cuda_speedup(index: int, dtype: torch.dtype, size: int = 2048, repeats: int = PROBE_REPEATS) -> float:
    """fp32 time / ``dtype`` time of the same ``size`` x ``size`` matmul on CUDA device ``index`` (timed with CUDA
    events, best of ``repeats``). Raises RuntimeError where the GPU cannot run ``dtype``."""
    device = torch.device("cuda", index)

    def best_ms(kind: torch.dtype) -> float:
        generator = torch.Generator(device).manual_seed(0)
        a = torch.randn(size, size, device=device, generator=generator).to(kind)  # (size, size)
        b = torch.randn(size, size, device=device, generator=generator).to(kind)  # (size, size)
        torch.mm(a, b)  # warm-up: kernel choice, cuBLAS handle
        best = float("inf")
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.mm(a, b)
            end.record()
            end.synchronize()
            best = min(best, start.elapsed_time(end))
        return best

    with torch.inference_mode(), torch.cuda.device(device):
        return best_ms(torch.float32) / best_ms(dtype)


def choose_precision(
    setting: str,
    device: torch.device,
    flags: frozenset[str] | None = None,
    speedup: Callable[[], float] = saved_cpu_bf16_speedup,
) -> Precision:
    """Resolve ``runtime.dtype`` for ``device``. ``flags`` (default: this CPU's) and ``speedup`` (default: this
    machine's saved probe) are what ``auto`` decides from on a CPU; the probe is read only when the flags allow bf16."""
    if setting != "auto":
        if setting not in DTYPES:
            raise ValueError(f"unknown runtime.dtype '{setting}'; valid: auto, {', '.join(DTYPES)}")
        return Precision(DTYPES[setting], "forced")
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported():
            return Precision(torch.bfloat16, "cuda: bf16 supported")
        return Precision(torch.float32, "cuda: no bf16 support")
    if device.type != "cpu":
        return Precision(torch.float32, f"{device.type}: float32")
    flags = cpu_flags() if flags is None else flags
    native = [flag for flag in NATIVE_BF16_FLAGS if flag in flags]
    if not native:
        return Precision(torch.float32, f"no native bf16 ({'/'.join(NATIVE_BF16_FLAGS)})")
    ratio = speedup()
    verdict = "" if ratio >= MIN_SPEEDUP else f" < {MIN_SPEEDUP}x"
    return Precision(torch.bfloat16 if ratio >= MIN_SPEEDUP else torch.float32, f"probe: bf16 {ratio:.1f}x fp32{verdict}")


def autocast_for(device: torch.device, dtype: torch.dtype) -> AbstractContextManager[object]:
    """The context a stage forward runs in: bf16 autocast on ``device``, or nothing for float32."""
    if dtype == torch.float32:
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)
