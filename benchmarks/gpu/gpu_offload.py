"""Offloading on one GPU: avatargen's block streaming side by side with the alternatives, on the same modules.

Five base-size models with random bf16 weights render 960x960 frames (the pixel count of 1280x720) through avatargen's
own Pipeline and Stages: per chunk the context stage (audio encoder), the A2V DiT (``sampling_steps`` forward passes
for the N chunk and again for the I chunk of its seam), the SR DiT and the streaming VAE decoder, each stage inside
its module's ``active()`` exactly as in a render. Sizes (built from avatargen's own *Params dataclasses):

    A2V DiT   1.31 B  dim 1536, 22 blocks; 60x60 latents, patch 2: 900 tokens a frame, 14,400 video tokens for a
                      16-frame window (Wan2.1 at 1280x720: 4 latent frames x 3,600 tokens, the same count)
    SR DiT    0.51 B  dim 1024, 28 + 12 face blocks; 60x60 -> 120x120 latents, 1,800 + 2,160 tokens a frame
    VAE       34 M    widths 512/256/128 (x8), decodes 120x120x16 latents to 960x960 RGB
    audio     33 M    dim 768, 8 blocks        text   43 M    dim 768, 6 blocks

The placements compared (each in its own process, so a crash or an out-of-memory error stays in its row):

    (a) avatargen runtime.offload=none    every module resident
    (b) avatargen runtime.offload=block   pinned host weights, transformer blocks copied just in time
    (c) avatargen runtime.offload=model   a whole module copied in on stage entry, dropped (not copied back) on exit
    (d) diffusers apply_group_offloading(block_level, num_blocks_per_group=1, use_stream=True)
    (e) accelerate cpu_offload_with_hook chain, in the order of diffusers' enable_model_cpu_offload

Measured per config, after a warm-up render: seconds per steady-state chunk (16 frames: N chunk + I chunk + SR +
decode, CUDA-synchronised), the visible stage-switch time (CUDA events from the end of one stage's work to the end of
the next stage's first block, the same for every config; avatargen's OffloadMonitor too), peak device memory, and the
achieved host-to-device GB/s (from the profiler's copy records, the same for every config; avatargen's monitor too).
A memory check renders 5 and 50 chunks under avatargen ``block``: the peak must not grow.

    python benchmarks/gpu/gpu_offload.py --json-out out/gpu_offload.json   # one H200: about 5 minutes
    python benchmarks/gpu/gpu_offload.py --smoke                             # CPU, fp32, tiny models: under a minute
    python benchmarks/gpu/gpu_offload.py --smoke --hide diffusers accelerate  # as on a machine without them

diffusers and accelerate are optional (``pip install -e '.[bench]'``); without them their rows say so. The GPU
machine reaches no index: benchmarks/gpu/fetch_offload_wheels.sh fetches the wheels here, and benchmarks/gpu/gpu_checks.sh
runs this script there (with the offload tests and a render) in one device call.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import math
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch
from torch import nn

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # run from a checkout without an install, as on the GPU machine

from avatargen.config.schema import Config, Device, Offload, RuntimeConfig, WeightsSource  # noqa: E402
from avatargen.config.families import family_named  # noqa: E402
from avatargen.config.validate import validate_config  # noqa: E402
from avatargen.io.null_sink import NullSink  # noqa: E402
from avatargen.families.tiny.models.a2v_dit import A2VDiTParams  # noqa: E402
from avatargen.families.tiny.models.audio_encoder import AudioEncoderParams  # noqa: E402
from avatargen.families.tiny.models.sr_dit import SRDiTParams  # noqa: E402
from avatargen.families.tiny.models.text_encoder import TextEncoderParams  # noqa: E402
from avatargen.families.tiny.models.vae import VAEParams  # noqa: E402
from avatargen.modules import Module, ModuleSpec, PlacementPlan, tensors_digest  # noqa: E402
from avatargen.families.tiny.build import TinyModelSet, module_specs  # noqa: E402
from avatargen.families.tiny.config import TinyModelConfig  # noqa: E402
from tests.conftest import engine_of  # noqa: E402
from avatargen.pipeline.build import pipeline_for  # noqa: E402
from avatargen.pipeline.pipeline import Pipeline, Progress  # noqa: E402
from avatargen.runtime.offload import OffloadMonitor  # noqa: E402
from avatargen.pipeline.run import RenderRun

GiB = 2**30

# --------------------------------------------------------------------------------------------------------------
# Sizes and configs
# --------------------------------------------------------------------------------------------------------------


def base_model() -> TinyModelConfig:
    """The base-size model set at 960x960 (see the module docstring)."""
    return TinyModelConfig(
        weights=WeightsSource.random,
        image_size=960,
        audio_encoder=AudioEncoderParams(n_mels=80, dim=768, layers=8, out_dim=768),
        text_encoder=TextEncoderParams(dim=768, layers=6, heads=12),
        vae=VAEParams(latent_channels=16, widths=[512, 256, 128], blocks_per_level=1, decoder_widths=None),
        a2v=A2VDiTParams(latent_channels=16, latent_size=60, patch_size=2, dim=1536, depth=22, heads=12, audio_dim=768, text_dim=768),
        sr=SRDiTParams(latent_channels=16, low_size=60, high_size=120, patch_size=4, dim=1024, depth=28, heads=16, face_patch_size=2, face_depth=12),
    )


def smoke_model() -> TinyModelConfig:
    """Tiny sizes for ``--smoke``: the same code path in seconds on a CPU."""
    return TinyModelConfig(
        weights=WeightsSource.random,
        image_size=64,
        audio_encoder=AudioEncoderParams(dim=32, layers=1, out_dim=32),
        text_encoder=TextEncoderParams(max_tokens=16, dim=32, layers=1, heads=2),
        vae=VAEParams(latent_channels=4, widths=[16, 8, 8], decoder_widths=None),
        a2v=A2VDiTParams(latent_channels=4, latent_size=4, patch_size=2, dim=64, depth=2, heads=4, audio_dim=32, text_dim=32),
        sr=SRDiTParams(latent_channels=4, low_size=4, high_size=8, patch_size=4, dim=64, depth=2, heads=4, face_patch_size=2, face_depth=1),
    )


@dataclass(frozen=True)
class Contender:
    """One row of the comparison: who places the weights, and the packages that needs (none: avatargen itself)."""

    key: str
    label: str
    needs: tuple[str, ...] = ()


CONFIGS = [
    Contender("a", "(a) avatargen offload=none"),
    Contender("b", "(b) avatargen offload=block"),
    Contender("c", "(c) avatargen offload=model"),
    Contender("d", "(d) diffusers group offload", ("diffusers", "accelerate")),  # its hooks use accelerate's send_to_device
    Contender("e", "(e) accelerate cpu_offload chain", ("accelerate",)),
]
AVATARGEN_POLICY = {"a": "none", "b": "block", "c": "model"}
ACCELERATE_ORDER = ("text_encoder", "audio_encoder", "a2v", "sr", "vae")  # diffusers' model_cpu_offload_seq order


# --------------------------------------------------------------------------------------------------------------
# Stage boundaries: the same measurement whoever places the weights
# --------------------------------------------------------------------------------------------------------------


class StageClock:
    """Times every stage switch as the gap from the end of one stage's work to the end of the next stage's first block.

    The end of a stage is marked when its ``active()`` body finishes (before its placement's exit runs); the first
    block of the next stage by a forward hook on the model's first block (first layer for the VAE). Whatever a
    placement does in between (copy the last model out, the next one in, wait for block 0) lands inside the gap,
    whether it runs in ``active()`` or in forward hooks. CUDA events on a GPU (no synchronisation inside the render),
    the host clock on a CPU (where everything is synchronous anyway).
    """

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.gaps: list[tuple[str, Any, Any]] = []
        self.reset()

    def reset(self) -> None:
        self.gaps = []
        self._last: tuple[str, Any] | None = None  # (stage, end-of-work mark)
        self._awaiting: tuple[str, str, Any] | None = None  # (previous stage, this stage, previous end mark)

    def _mark(self) -> Any:
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def entering(self, name: str) -> None:
        self._awaiting = (self._last[0], name, self._last[1]) if self._last is not None else None

    def first_block_done(self, name: str) -> None:
        if self._awaiting is not None and self._awaiting[1] == name:
            previous, _, start = self._awaiting
            self.gaps.append((f"{previous}->{name}", start, self._mark()))
            self._awaiting = None

    def done(self, name: str) -> None:
        self._last = (name, self._mark())

    def summary(self) -> dict[str, Any]:
        """Mean gap over all switches and per kind of switch (``a2v->sr``...), in ms; waits for the events."""
        if self.cuda:
            torch.cuda.synchronize()
        by_kind: dict[str, list[float]] = {}
        for kind, start, end in self.gaps:
            ms = start.elapsed_time(end) if self.cuda else (end - start) * 1e3
            by_kind.setdefault(kind, []).append(ms)
        every = [ms for values in by_kind.values() for ms in values]
        return {
            "switches": len(every),
            "gap_ms": round(float(np.mean(every)), 3) if every else None,
            "gap_ms_max": round(float(np.max(every)), 3) if every else None,
            "by_kind": {kind: {"n": len(v), "mean_ms": round(float(np.mean(v)), 3)} for kind, v in sorted(by_kind.items())},
        }


def first_blocks(name: str, model: nn.Module) -> list[nn.Module]:
    """The module whose end marks a stage's first real compute: block 0 of the model's first block list (a2v, sr,
    audio and text encoders), else the first layer of each entry point (VAE: the encoder's conv_in for ``encode``,
    the decoder's causal_in for ``decode`` and ``still_cache``)."""
    for child in model.children():
        if isinstance(child, nn.ModuleList) and len(child):
            return [child[0]]
    if name == "vae":
        return [model.encoder.conv_in, model.decoder.causal_in]
    return [next(m for m in model.modules() if next(m.parameters(recurse=False), None) is not None)]


class StageProbe:
    """What the stages see of a Module (``name``, ``model``, ``device``, ``active()``), with its switches timed.

    ``enter`` is the placement's own context manager: ``Module.active`` for avatargen, a no-op (or the hook a
    diffusers VAE method would call) where forward hooks place the weights.
    """

    def __init__(self, name: str, model: nn.Module, device: torch.device, enter: Callable[[], Any], clock: StageClock):
        self.name, self.model, self.device = name, model, device
        self._enter, self._clock = enter, clock
        for block in first_blocks(name, model):
            block.register_forward_hook(lambda *_: clock.first_block_done(name))

    @property
    def compute_dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    def weights_digest(self) -> str:
        """As ``Module.weights_digest`` (the CPU smoke run keys its reference cache on it)."""
        return tensors_digest(self.model.state_dict().items())

    @contextmanager
    def active(self) -> Iterator[nn.Module]:
        self._clock.entering(self.name)
        with self._enter() as model:
            yield model
            self._clock.done(self.name)


@contextmanager
def hooks_place(model: nn.Module, before: Callable[[], Any] | None = None) -> Iterator[nn.Module]:
    """Stage entry where forward hooks own placement: nothing to do but, for entry points that are not ``forward``,
    what diffusers' ``apply_forward_hook`` decorator does (call the accelerate hook's ``pre_forward``)."""
    if before is not None:
        before()
    yield model


# --------------------------------------------------------------------------------------------------------------
# Placements
# --------------------------------------------------------------------------------------------------------------


def tensor_bytes(module: nn.Module) -> int:
    tensors = {id(t): t for t in [*module.parameters(), *module.buffers()]}.values()
    return sum(t.numel() * t.element_size() for t in tensors)


def build_models(config: Config, device: torch.device, dtype: torch.dtype, seed: int) -> dict[str, nn.Module]:
    """The five models from avatargen's own specs, seeded; parameters in ``dtype``, buffers (mel filters, STFT
    window, latent statistics) kept fp32 as the stages feed them fp32 inputs."""
    models = {}
    for i, spec in enumerate(module_specs(config)):
        torch.manual_seed(seed + i)
        with torch.device(device):  # random init on the GPU: a second for 1.3 B parameters, a minute on the host
            model = spec.build()
        model.eval().requires_grad_(False)
        for param in model.parameters():
            param.data = param.data.to(dtype)
        models[spec.name] = model
    return models


def meta_copy(model: nn.Module) -> nn.Module:
    """``model``'s structure with meta parameters (no weight memory); buffers are shared, small, and copied in."""
    memo = {id(p): nn.Parameter(p.detach().to("meta"), requires_grad=False) for p in model.parameters()}
    memo.update({id(b): b for b in model.buffers()})
    return copy.deepcopy(model, memo)


def place_avatargen(models: dict[str, nn.Module], device: torch.device, policy: str, resident_blocks: int) -> tuple[dict, OffloadMonitor, str]:
    """avatargen's own placement pass: each model rebuilt on the meta device and placed by ``policy`` from the built
    model's tensors (as from a checkpoint), the five sharing one monitor."""
    monitor = OffloadMonitor(policy, resident_blocks, device)
    enters = {}
    for name, model in models.items():
        dtype = next(model.parameters()).dtype
        spec = ModuleSpec(name, lambda m=model: meta_copy(m))
        plan = PlacementPlan(policy, device, dtype, resident_blocks)
        module = Module.from_state_dict(spec, model.state_dict(), plan, monitor)
        enters[name] = module.active
    return enters, monitor, f"Module(offload={policy}, resident_blocks={resident_blocks})"


def place_diffusers(models: dict[str, nn.Module], device: torch.device, record_stream: bool) -> tuple[dict, None, str]:
    """diffusers group offloading on every model: block level, one block a group, copies on a side stream.
    Without ``record_stream`` (its default) every group's offload first synchronises the compute stream.

    The VAE is the exception: ``decode`` and ``still_cache`` call its decoder's layers directly, never
    ``VAE.forward`` where block-level hooks sit, so its encoder and decoder get leaf-level hooks (one per conv), and
    the VAE's own two latent-statistics buffers (2 x 16 floats) stay on the device.
    """
    from diffusers.hooks import apply_group_offloading

    stream = device.type == "cuda"  # diffusers refuses streams on a CPU onload device
    common = dict(onload_device=device, offload_device=torch.device("cpu"), use_stream=stream, record_stream=stream and record_stream)
    for name, model in models.items():
        model.to("cpu")
        if name == "vae":
            for part in (model.encoder, model.decoder):
                apply_group_offloading(part, offload_type="leaf_level", **common)
            for key, buffer in list(model.named_buffers(recurse=False)):
                setattr(model, key, buffer.to(device))
        else:
            apply_group_offloading(model, offload_type="block_level", num_blocks_per_group=1, **common)
    how = f"apply_group_offloading(block_level, num_blocks_per_group=1, use_stream={stream}, record_stream={common['record_stream']}); VAE leaf_level"
    return {name: (lambda m=model: hooks_place(m)) for name, model in models.items()}, None, how


def place_accelerate(models: dict[str, nn.Module], device: torch.device) -> tuple[dict, None, str]:
    """accelerate's ``cpu_offload_with_hook`` chained in diffusers' offload order: a model comes to the device on its
    forward and its predecessor in the chain goes back to the host. The VAE is entered through ``encode``/``decode``,
    so its hook is called on stage entry, as diffusers' ``apply_forward_hook`` does for its VAEs."""
    from accelerate import cpu_offload_with_hook

    execution = torch.device("cuda", torch.cuda.current_device()) if device.type == "cuda" else device
    previous = None
    for name in ACCELERATE_ORDER:
        _, previous = cpu_offload_with_hook(models[name], execution, prev_module_hook=previous)
    enters = {name: (lambda m=model: hooks_place(m)) for name, model in models.items()}
    vae = models["vae"]
    enters["vae"] = lambda: hooks_place(vae, before=lambda: vae._hf_hook.pre_forward(vae))
    return enters, None, "cpu_offload_with_hook chain " + "->".join(ACCELERATE_ORDER)


# --------------------------------------------------------------------------------------------------------------
# One render, timed
# --------------------------------------------------------------------------------------------------------------


def speechlike(seconds: float, rate: int) -> np.ndarray:
    t = np.arange(int(round(seconds * rate))) / rate
    envelope = np.clip(np.sin(2 * np.pi * 4.0 * t), 0, None) * (np.sin(2 * np.pi * 0.5 * t) > -0.3)
    voice = sum(np.sin(2 * np.pi * f * t) / k for k, f in enumerate((140, 280, 420, 560), start=1))
    return (0.3 * envelope * voice).astype(np.float32)


@dataclass
class Bench:
    """One worker's pipeline, inputs and clocks."""

    config: Config
    device: torch.device
    dtype: torch.dtype
    pipeline: Pipeline
    clock: StageClock
    reference: np.ndarray
    monitor: Any = None
    notes: list[str] = field(default_factory=list)

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def render(self, chunks: int, on_chunk: Callable[[int], None] | None = None) -> dict[str, Any]:
        """Render ``chunks`` N chunks of audio; returns the seconds of each steady-state chunk (all but the first:
        from the end of one N chunk's body to the end of the next one's, which covers an N chunk, the I chunk of the
        seam before it, SR and decode of both)."""
        cfg = self.config
        frames = chunks * cfg.pipeline.n_chunk_frames
        wave = speechlike(frames / cfg.model.fps, cfg.model.sample_rate)
        block = int(cfg.pipeline.audio_block_s * cfg.model.sample_rate)
        ends: dict[int, float] = {}

        def progress(p: Progress) -> None:
            self.sync()
            ends[p.n_chunks_done] = time.perf_counter()  # the last emit of chunk n overwrites its earlier ones
            if on_chunk is not None:
                on_chunk(p.n_chunks_done)

        started = time.perf_counter()
        with torch.autocast(self.device.type, dtype=self.dtype, enabled=self.dtype != torch.float32):
            stats = self.pipeline.render(self.reference, (wave[i : i + block] for i in range(0, wave.size, block)), [NullSink()], prompt="a person speaking", run=RenderRun(on_progress=progress))
        self.sync()
        wall = time.perf_counter() - started
        marks = [ends[n] for n in sorted(ends)]
        return {
            "wall_s": wall,
            "frames": stats.frames,
            "n_chunks": stats.n_chunks,
            "i_chunks": stats.i_chunks,
            "chunk_s": [b - a for a, b in zip(marks, marks[1:])],
            "stage_s": {k: round(v, 4) for k, v in stats.stage_s.items()},
        }


def make_bench(args: argparse.Namespace, key: str) -> tuple[Bench, dict[str, Any]]:
    """Build the five models, place them as config ``key`` says, wrap them for timing."""
    device = torch.device("cpu") if args.smoke else torch.device("cuda", torch.cuda.current_device())
    dtype = torch.float32 if args.dtype == "fp32" else torch.bfloat16
    model_cfg = smoke_model() if args.smoke else base_model()
    config = Config(model=model_cfg, runtime=RuntimeConfig(device=Device(device.type), offload=Offload.none), seed=0)
    validate_config(config, family_named(config.model.family))
    models = build_models(config, device, dtype, seed=0)
    blocks = [b for name in ("a2v", "sr") for child in models[name].children() if isinstance(child, nn.ModuleList) for b in child]
    info: dict[str, Any] = {
        "params": {name: sum(p.numel() for p in m.parameters()) for name, m in models.items()},
        "param_bytes": {name: tensor_bytes(m) for name, m in models.items()},
        "largest_block_bytes": max(tensor_bytes(b) for b in blocks),
    }
    if key in AVATARGEN_POLICY:
        enters, monitor, how = place_avatargen(models, device, AVATARGEN_POLICY[key], args.resident_blocks)
    elif key == "d":
        enters, monitor, how = place_diffusers(models, device, args.diffusers_record_stream)
    else:
        enters, monitor, how = place_accelerate(models, device)
    clock = StageClock(device)
    probes = {name: StageProbe(name, models[name], device, enters[name], clock) for name in models}
    # The hook-placed configs get an idle monitor: ModelSet carries one, and nothing feeds it there.
    pipeline = pipeline_for(config, TinyModelSet(**probes, monitor=monitor or OffloadMonitor("none", args.resident_blocks, device)), engine_of(config))
    size = config.model.image_size
    reference = np.random.default_rng(0).integers(0, 256, (size, size, 3), dtype=np.uint8)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        info["resident_bytes"] = torch.cuda.memory_allocated(device)
    return Bench(config, device, dtype, pipeline, clock, reference, monitor, [how]), info


def copy_records(trace: Path) -> dict[str, Any]:
    """Host-to-device copies in a profiler trace: bytes, busy time, GB/s, and how many came from pinned memory."""
    events = json.loads(trace.read_text()).get("traceEvents", [])
    # Kineto names them "Memcpy HtoD (Pinned -> Device)" / "(Pageable -> Device)" (category gpu_memcpy, or Memcpy
    # in older builds), with the byte count in args.
    copies = [e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("Memcpy HtoD")]
    total = sum(int(e.get("args", {}).get("bytes", 0)) for e in copies)
    pinned = sum(int(e.get("args", {}).get("bytes", 0)) for e in copies if "Pinned" in e["name"])
    busy_us = sum(float(e.get("dur", 0)) for e in copies)
    return {
        "copies": len(copies),
        "bytes": total,
        "pinned_bytes": pinned,
        "busy_ms": round(busy_us / 1e3, 3),
        "gbps": round(total / (busy_us * 1e-6) / 1e9, 2) if busy_us > 0 else None,
    }


def profiled_h2d(bench: Bench) -> dict[str, Any]:
    """The host-to-device copies of one steady-state chunk (the second of a 2-chunk render), from the profiler.
    On a CPU the same code runs with the CPU profiler and finds no copies."""
    from torch.profiler import ProfilerActivity, profile

    prof = profile(activities=[ProfilerActivity.CUDA if bench.device.type == "cuda" else ProfilerActivity.CPU])
    started = []

    def on_chunk(n: int) -> None:
        if n == 1 and not started:
            started.append(True)
            prof.start()

    bench.render(2, on_chunk)
    prof.stop()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        return copy_records(path)


# --------------------------------------------------------------------------------------------------------------
# Workers (one process each)
# --------------------------------------------------------------------------------------------------------------


def worker_config(args: argparse.Namespace, key: str) -> dict[str, Any]:
    started = time.perf_counter()
    bench, info = make_bench(args, key)
    result: dict[str, Any] = {"key": key, **info, "notes": bench.notes, "setup_s": round(time.perf_counter() - started, 1)}
    bench.render(args.warmup_chunks)
    cuda = bench.device.type == "cuda"
    if bench.monitor is not None:
        bench.monitor.reset()
    bench.clock.reset()
    if cuda:
        torch.cuda.reset_peak_memory_stats(bench.device)
    timed = bench.render(args.chunks + 1)
    result["timed"] = timed
    result["per_chunk_s"] = float(np.mean(timed["chunk_s"])) if timed["chunk_s"] else None
    result["peak_bytes"] = torch.cuda.max_memory_allocated(bench.device) if cuda else None
    result["switch"] = bench.clock.summary()
    result["monitor"] = bench.monitor.report() if bench.monitor is not None else None
    result["h2d"] = None
    if not args.no_profile:
        try:
            result["h2d"] = profiled_h2d(bench)
        except Exception as error:  # a profiler that cannot start costs a column, not the row
            result["notes"].append(f"profiler: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")
    return result


def worker_memory(args: argparse.Namespace) -> dict[str, Any]:
    """max_memory_allocated of renders of a few and of many chunks under avatargen block: must be identical."""
    bench, info = make_bench(args, "b")
    bench.render(args.warmup_chunks)
    cuda = bench.device.type == "cuda"
    runs = []
    for chunks in args.memory_chunks:
        if cuda:
            torch.cuda.reset_peak_memory_stats(bench.device)
        started = time.perf_counter()
        timed = bench.render(chunks)
        runs.append({
            "chunks": chunks,
            "frames": timed["frames"],
            "wall_s": round(time.perf_counter() - started, 2),
            "peak_bytes": torch.cuda.max_memory_allocated(bench.device) if cuda else None,
            "allocated_after_bytes": torch.cuda.memory_allocated(bench.device) if cuda else None,
        })
    peaks = [r["peak_bytes"] for r in runs]
    return {"key": "memory", "policy": "block", "runs": runs, "identical": (len(set(peaks)) == 1) if cuda else None, "notes": bench.notes}


def worker_pinned(args: argparse.Namespace) -> dict[str, Any]:
    """The machine's host-to-device peak: 1 GiB copies from pinned (and, for reference, pageable) memory."""
    device = torch.device("cuda", torch.cuda.current_device())
    target = torch.empty(GiB, dtype=torch.uint8, device=device)
    out = {"key": "pinned"}
    for kind, pin in (("pinned", True), ("pageable", False)):
        source = torch.ones(GiB, dtype=torch.uint8, pin_memory=pin)
        best = math.inf
        for i in range(8):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            target.copy_(source, non_blocking=pin)
            end.record()
            end.synchronize()
            if i >= 2:  # the first copies map and fault in the pages
                best = min(best, start.elapsed_time(end))
        out[f"{kind}_gbps"] = round(GiB / (best / 1e3) / 1e9, 2)
    out["device_name"] = torch.cuda.get_device_name(device)
    out["torch"] = torch.__version__
    return out


def run_worker(args: argparse.Namespace) -> None:
    for name in args.hide:
        sys.modules[name] = None  # type: ignore[assignment]  # `import name` now raises ImportError
    if args.smoke:
        torch.set_num_threads(1)  # tiny models: more threads only add contention on a shared 2-core machine
    try:
        if args.worker == "pinned":
            result = worker_pinned(args)
        elif args.worker == "memory":
            result = worker_memory(args)
        else:
            result = worker_config(args, args.worker)
        result["ok"] = True
    except Exception as error:
        traceback.print_exc()
        first = str(error).splitlines()[0] if str(error) else ""
        result = {"key": args.worker, "ok": False, "error": f"{type(error).__name__}: {first}"[:300]}
    print("RESULT " + json.dumps(result), flush=True)


# --------------------------------------------------------------------------------------------------------------
# The driver: one worker per config, then the table and the targets
# --------------------------------------------------------------------------------------------------------------


def available(package: str, hidden: list[str]) -> bool:
    return package not in hidden and importlib.util.find_spec(package) is not None


def spawn(args: argparse.Namespace, worker: str, timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", worker, "--chunks", str(args.chunks),
           "--warmup-chunks", str(args.warmup_chunks), "--resident-blocks", str(args.resident_blocks), "--dtype", args.dtype,
           "--memory-chunks", *map(str, args.memory_chunks)]
    cmd += ["--smoke"] * args.smoke + ["--no-profile"] * args.no_profile + ["--diffusers-record-stream"] * args.diffusers_record_stream
    cmd += ["--hide", *args.hide] if args.hide else []
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=max(timeout, 1), cwd=REPO)
    except subprocess.TimeoutExpired:
        return {"key": worker, "ok": False, "error": f"timed out after {timeout:.0f} s", "elapsed_s": round(timeout, 1)}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if lines:
        result = json.loads(lines[-1][len("RESULT "):])
    else:
        tail = [line for line in proc.stderr.strip().splitlines() if line.strip()][-1:] or [f"exit code {proc.returncode}"]
        result = {"key": worker, "ok": False, "error": f"worker died (exit {proc.returncode}): {tail[0]}"[:300]}
    if not result.get("ok"):
        result["stderr_tail"] = proc.stderr.strip().splitlines()[-15:]
    result["elapsed_s"] = round(time.perf_counter() - started, 1)
    return result


def fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "n/a" if value is None else f"{value:{spec}}{suffix}"


def summarise(rows: dict[str, dict[str, Any]], pinned: dict[str, Any] | None, memory: dict[str, Any] | None, smoke: bool) -> dict[str, Any]:
    """The table's numbers and the targets, from the workers' results."""
    a = rows.get("a", {})
    base = a.get("per_chunk_s") if a.get("ok") else None
    base_gap = a.get("switch", {}).get("gap_ms") if a.get("ok") else None
    table = {}
    for contender in CONFIGS:
        r = rows.get(contender.key)
        if r is None or not r.get("ok"):
            status = "not selected (--configs)" if r is None else (r.get("status") or r.get("error", "failed"))
            table[contender.key] = {"label": contender.label, "status": status}
            continue
        monitor = r.get("monitor") or {}
        gap = r["switch"].get("gap_ms")
        excess = gap - base_gap if gap is not None and base_gap is not None else None
        h2d = r.get("h2d") or {}
        table[contender.key] = {
            "label": contender.label,
            "status": "ok",
            "per_chunk_s": r["per_chunk_s"],
            "vs_a": r["per_chunk_s"] / base if base and r["per_chunk_s"] else None,
            "switch_ms": monitor.get("switch_ms_mean") if monitor else excess,
            "switch_source": "monitor" if monitor else "events",
            "gap_ms": gap,
            "gap_excess_ms": excess,
            "peak_gib": r["peak_bytes"] / GiB if r.get("peak_bytes") is not None else None,
            "h2d_gbps": monitor.get("h2d_gbps") if monitor.get("h2d_gbps") is not None else h2d.get("gbps"),
            "h2d_source": "monitor" if monitor.get("h2d_gbps") is not None else ("profiler" if h2d else None),
            "h2d_gb_per_chunk": h2d["bytes"] / 1e9 if h2d else None,
        }

    bound = None
    if a.get("ok") and a.get("peak_bytes") is not None:
        weights = sum(a["param_bytes"].values())
        activations = max(a["peak_bytes"] - weights, 0)
        largest = max(a["param_bytes"].values())
        bound = {
            "largest_module_bytes": largest,
            "largest_module": max(a["param_bytes"], key=a["param_bytes"].get),
            "two_blocks_bytes": 2 * a["largest_block_bytes"],
            "activations_bytes": activations,
            "bound_bytes": largest + 2 * a["largest_block_bytes"] + activations,
            "how": "largest module + 2 x largest DiT block + activations (peak of (a) minus all weights)",
        }

    b = table.get("b", {})
    b_ok = b.get("status") == "ok"
    targets = {}
    targets["b_within_3pct_of_a"] = {
        "value": b.get("vs_a"), "limit": 1.03, "pass": (b["vs_a"] <= 1.03) if b_ok and b.get("vs_a") is not None else None}
    targets["visible_switch_le_5ms"] = {
        "value": b.get("switch_ms"), "source": b.get("switch_source"), "events_excess_ms": b.get("gap_excess_ms"), "limit": 5.0,
        "pass": (b["switch_ms"] <= 5.0) if b_ok and b.get("switch_ms") is not None and not smoke else None}
    peak_b = rows.get("b", {}).get("peak_bytes") if b_ok else None
    targets["peak_le_bound"] = {
        "value_bytes": peak_b, "bound_bytes": bound["bound_bytes"] if bound else None,
        "pass": (peak_b <= bound["bound_bytes"]) if peak_b is not None and bound else None}
    others = {k: table[k]["per_chunk_s"] for k in ("c", "d", "e") if table.get(k, {}).get("status") == "ok"}
    targets["b_ahead_of_c_d_e"] = {
        "value": b.get("per_chunk_s"), "others": others, "missing": [k for k in ("c", "d", "e") if k not in others],
        "pass": all(b["per_chunk_s"] < v for v in others.values()) if b_ok and others else None}
    mem_ok = memory is not None and memory.get("ok")
    targets["memory_flat_5_vs_50"] = {
        "runs": memory.get("runs") if mem_ok else None, "pass": memory.get("identical") if mem_ok else None,
        "error": None if mem_ok or memory is None else memory.get("error")}
    if smoke:  # tiny models on a CPU: the checks run, but they judge nothing
        for check in targets.values():
            check["smoke_pass"], check["pass"] = check["pass"], None
    return {"table": table, "bound": bound, "targets": targets, "pinned": pinned}


def print_report(summary: dict[str, Any], smoke: bool) -> None:
    print(f"{'config':<34} {'s/chunk':>8} {'vs (a)':>7} {'switch ms':>11} {'gap+ ms':>8} {'peak GiB':>9} {'H2D GB/s':>10} {'GB/chunk':>9}")
    for row in summary["table"].values():
        if row["status"] != "ok":
            print(f"{row['label']:<34} {row['status']}")
            continue
        source = {"monitor": "m", "events": "e"}.get(row["switch_source"], "")
        h2d_source = {"monitor": "m", "profiler": "p"}.get(row["h2d_source"] or "", "")
        print(f"{row['label']:<34} {fmt(row['per_chunk_s'], '8.3f')} {fmt(row['vs_a'], '7.3f')} "
              f"{fmt(row['switch_ms'], '9.2f', ' ' + source):>11} {fmt(row['gap_excess_ms'], '8.2f')} "
              f"{fmt(row['peak_gib'], '9.2f')} {fmt(row['h2d_gbps'], '8.1f', ' ' + h2d_source):>10} {fmt(row['h2d_gb_per_chunk'], '9.2f')}")
    print("switch ms: mean stage switch, m = avatargen's OffloadMonitor, e = CUDA events (gap+ of this row); "
          "gap+ ms: CUDA-event gap from the end of a stage to the end of the next stage's first block, minus (a)'s; "
          "H2D: m = monitor, p = profiler copy records")
    pinned = summary["pinned"]
    if pinned and pinned.get("ok"):
        print(f"host-to-device peak of this machine (1 GiB copy): pinned {pinned['pinned_gbps']} GB/s, pageable {pinned['pageable_gbps']} GB/s ({pinned['device_name']})")
    elif pinned:
        print(f"host-to-device peak: {pinned.get('error', 'n/a')}")
    bound = summary["bound"]
    if bound:
        print(f"memory bound: {bound['largest_module']} {bound['largest_module_bytes'] / GiB:.2f} GiB + two blocks "
              f"{bound['two_blocks_bytes'] / GiB:.2f} GiB + activations {bound['activations_bytes'] / GiB:.2f} GiB "
              f"= {bound['bound_bytes'] / GiB:.2f} GiB")
    t = summary["targets"]

    def verdict(check: dict[str, Any]) -> str:
        if smoke:
            return "n/a (smoke: tiny models on a CPU, not a measurement)"
        return {True: "PASS", False: "FAIL", None: "n/a"}[check["pass"]]

    c = t["b_within_3pct_of_a"]
    print(f"target (b) within 3 % of (a): {fmt(c['value'], '.3f', 'x')} <= 1.030x: {verdict(c)}")
    c = t["visible_switch_le_5ms"]
    print(f"target visible switch (b) <= 5 ms: {fmt(c['value'], '.2f', ' ms')} ({c['source'] or 'n/a'}; CUDA events +{fmt(c['events_excess_ms'], '.2f', ' ms')} over (a)): {verdict(c)}")
    c = t["peak_le_bound"]
    value = None if c["value_bytes"] is None else c["value_bytes"] / GiB
    limit = None if c["bound_bytes"] is None else c["bound_bytes"] / GiB
    print(f"target peak memory (b) <= bound: {fmt(value, '.2f', ' GiB')} <= {fmt(limit, '.2f', ' GiB')}: {verdict(c)}")
    c = t["b_ahead_of_c_d_e"]
    others = ", ".join(f"({k}) {v:.3f} s" for k, v in c["others"].items()) or "none ran"
    missing = f"; not run: {', '.join(c['missing'])}" if c["missing"] else ""
    print(f"target (b) ahead of (c), (d), (e): {fmt(c['value'], '.3f', ' s')} vs {others}{missing}: {verdict(c)}")
    c = t["memory_flat_5_vs_50"]
    if c["runs"]:
        peaks = ", ".join(f"{r['chunks']} chunks {fmt(None if r['peak_bytes'] is None else r['peak_bytes'] / 2**20, '.1f', ' MiB')}" for r in c["runs"])
        print(f"target max_memory_allocated identical for short and long renders (avatargen block): {peaks}: {verdict(c)}")
    else:
        print(f"target max_memory_allocated identical for short and long renders: {c['error'] or 'not run'}: n/a")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="CPU, fp32, tiny models, 2 chunks (exercises the code)")
    parser.add_argument("--chunks", type=int, default=None, help="steady-state chunks timed per config (default 5; smoke 1)")
    parser.add_argument("--warmup-chunks", type=int, default=None, help="chunks of the warm-up render (default 2; smoke 1)")
    parser.add_argument("--configs", default="abcde", help="which of a-e to run (default all)")
    parser.add_argument("--memory-check", action=argparse.BooleanOptionalAction, default=True, help="render --memory-chunks under avatargen block and compare peaks")
    parser.add_argument("--memory-chunks", type=int, nargs="+", default=None, help="chunk counts of the memory check (default 5 50; smoke 2 3)")
    parser.add_argument("--resident-blocks", type=int, default=getattr(RuntimeConfig(), "offload_resident_blocks", 2), help="avatargen block: blocks of one model on the device at once")
    parser.add_argument("--dtype", choices=["bf16", "fp32"], default=None, help="parameter dtype (default bf16; smoke fp32)")
    parser.add_argument("--hide", nargs="*", default=[], metavar="PACKAGE", help="act as if these packages were not installed (diffusers, accelerate)")
    parser.add_argument("--diffusers-record-stream", action="store_true", help="(d) with record_stream=True (not its default)")
    parser.add_argument("--no-profile", action="store_true", help="skip the profiled render that measures H2D copies")
    parser.add_argument("--budget-s", type=float, default=420.0, help="wall-clock budget; configs that would start after it are skipped")
    parser.add_argument("--json-out", type=Path, help="also write the JSON line to this file")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.chunks = args.chunks if args.chunks is not None else (1 if args.smoke else 5)
    args.warmup_chunks = args.warmup_chunks if args.warmup_chunks is not None else (1 if args.smoke else 2)
    args.memory_chunks = args.memory_chunks or ([2, 3] if args.smoke else [5, 50])
    args.dtype = args.dtype or ("fp32" if args.smoke else "bf16")
    if args.worker:
        run_worker(args)
        return
    if not args.smoke and not torch.cuda.is_available():
        sys.exit("gpu_offload.py needs a CUDA device; --smoke runs the same code on the CPU with tiny models")

    started = time.perf_counter()
    deadline = started + args.budget_s
    print(f"# {date.today()} {platform.node()} torch {torch.__version__} "
          f"{'smoke: CPU tiny' if args.smoke else 'base sizes 960x960'} {args.dtype} "
          f"chunks={args.chunks} warmup={args.warmup_chunks} resident_blocks={args.resident_blocks} hide={args.hide or '-'}", flush=True)

    def launch(worker: str, cap: float) -> dict[str, Any]:
        left = deadline - time.perf_counter()
        if left < 20:
            return {"key": worker, "ok": False, "status": "skipped (time budget)", "error": "skipped (time budget)"}
        result = spawn(args, worker, min(cap, left))
        status = "ok" if result.get("ok") else result.get("error")
        print(f"  [{time.perf_counter() - started:6.1f} s] {worker}: {status} ({result.get('elapsed_s')} s)", file=sys.stderr, flush=True)
        return result

    pinned = None if args.smoke else launch("pinned", 60)
    rows: dict[str, dict[str, Any]] = {}
    memory = None
    cap = 60 if args.smoke else 150
    for contender in CONFIGS:
        if contender.key not in args.configs:
            continue
        missing = [package for package in contender.needs if not available(package, args.hide)]
        if missing:
            rows[contender.key] = {"key": contender.key, "ok": False, "status": f"skipped (not installed: {', '.join(missing)})"}
        else:
            rows[contender.key] = launch(contender.key, cap)
        if contender.key == "b" and args.memory_check:  # before the slow baselines: a required check
            memory = launch("memory", 60 if args.smoke else 180)

    summary = summarise(rows, pinned, memory, args.smoke)
    print_report(summary, args.smoke)
    record = {
        "date": str(date.today()), "host": platform.node(), "torch": torch.__version__, "smoke": args.smoke,
        "dtype": args.dtype, "image_size": (smoke_model() if args.smoke else base_model()).image_size,
        "chunks": args.chunks, "warmup_chunks": args.warmup_chunks, "resident_blocks": args.resident_blocks,
        "hidden": args.hide, "wall_s": round(time.perf_counter() - started, 1),
        **summary, "rows": rows, "memory": memory,
    }
    line = json.dumps(record)
    print(line)
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(line + "\n")


if __name__ == "__main__":
    main()
