"""The bundled family's five models as parts: architecture from ``model.*``, weights from its checkpoint (a folder of
``<name>.safetensors``, shipped in the package) or a seeded init; avatargen/pipeline/parts.py places them by
``runtime.*`` (and shards them under torchrun) in one pass, and ``model_set`` wraps them."""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass, field, replace
from functools import partial

import torch

from avatargen.config.schema import Config, WeightsSource
from avatargen.config.families import resolve_checkpoint
from avatargen.families.tiny.config import SHIPPED_CHECKPOINTS, check_checkpoint_architecture
from avatargen.families.tiny.plan import BUILD_THREADS
from avatargen.families.tiny.models import MODEL_CLASSES
from avatargen.modules import Module, ModuleSpec
from avatargen.pipeline.build import resolve_precision
from avatargen.pipeline.parts import ModelPart, place_parts
from avatargen.runtime.distributed import ParallelContext, world_info
from avatargen.runtime.offload import OffloadMonitor, Resident
from avatargen.runtime.placement import RandomInit
from avatargen.runtime.precision import Precision
from avatargen.runtime.quantize import choose_quantization, quantize_linears
from avatargen.runtime.tensor_source import open_checkpoint


@dataclass
class TinyModelSet:
    """The five modules of one model config, the monitor of their placement (reset per render), and the compute
    precision their forwards run in."""

    audio_encoder: Module
    text_encoder: Module
    vae: Module
    a2v: Module
    sr: Module
    monitor: OffloadMonitor
    precision: Precision = Precision(torch.float32, "default")
    _int8: dict[str, Module] = field(default_factory=dict, repr=False)
    _int8_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def all(self) -> list[Module]:
        return [self.audio_encoder, self.text_encoder, self.vae, self.a2v, self.sr]

    def fast(self, name: str) -> Module:
        """DiT ``name`` (``a2v`` or ``sr``) as the render's precision computes it after its first segment: with int8
        linear layers where ``runtime.quantize`` resolved to int8 (a copy, packed on first use, once per process; the
        float module stays for every render's first segment), else the module itself."""
        module: Module = getattr(self, name)
        quantization = self.precision.quantization
        if not quantization.int8:
            return module
        with self._int8_lock:  # either overlapped thread may ask first
            if name not in self._int8:
                model = copy.deepcopy(module.model)
                quantize_linears(model, quantization.engine)
                self._int8[name] = Module(name, Resident(model, module.device, self.monitor, name), module.compute_dtype)
            return self._int8[name]


def module_specs(config: Config) -> list[ModuleSpec]:
    return [ModuleSpec(name, partial(model_class, getattr(config.model, name))) for name, model_class in MODEL_CLASSES.items()]


def model_parts(config: Config) -> list[ModelPart]:
    """The five models, in load order: loaded strictly (names and shapes checked) from the memory-mapped checkpoint
    (its architecture checked against the config first), or randomly initialised from ``seed`` where they live."""
    random = config.model.weights == WeightsSource.random
    checkpoint = None if random else resolve_checkpoint(config, SHIPPED_CHECKPOINTS)
    if checkpoint is not None:
        check_checkpoint_architecture(config, checkpoint)

    def weights(index: int, name: str):
        return (lambda: RandomInit(config.seed + index)) if checkpoint is None else (lambda: open_checkpoint(checkpoint, name))

    return [ModelPart(spec.name, spec.build, weights(i, spec.name)) for i, spec in enumerate(module_specs(config))]


def model_set(config: Config, modules: dict[str, Module], monitor: OffloadMonitor, precision: Precision,
              parallel: ParallelContext) -> TinyModelSet:  # fmt: skip
    """The placed modules as the bundled family's set; its forwards compute in ``precision`` (the weights stay
    float32); where ``runtime.quantize`` resolves to int8 the two DiTs also get int8 copies (``TinyModelSet.fast``)."""
    models = TinyModelSet(*(modules[name] for name in MODEL_CLASSES), monitor=monitor, precision=precision)
    quantization = choose_quantization(config.runtime.quantize.value, modules["a2v"].device, precision.dtype,
                                       single_process=parallel.world.world_size == 1,
                                       resident=config.runtime.offload.value == "none")  # fmt: skip
    models.precision = replace(precision, quantization=quantization)
    return models


def build_modules(config: Config, device: torch.device, parallel: ParallelContext | None = None,
                  precision: Precision | None = None) -> TinyModelSet:  # fmt: skip
    """The five modules placed for ``device`` outside the process's model cache (scripts, tests): what a render
    builds, with ``precision`` instead of ``runtime.dtype`` resolved where given."""
    parallel = parallel if parallel is not None else ParallelContext(world_info())
    precision = precision if precision is not None else resolve_precision(config, device, parallel)
    monitor = OffloadMonitor(config.runtime.offload.value, config.runtime.offload_resident_blocks, device)
    modules = place_parts(config, model_parts(config), device, parallel, monitor, precision, BUILD_THREADS)
    return model_set(config, modules, monitor, precision, parallel)
