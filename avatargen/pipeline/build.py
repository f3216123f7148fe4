"""Builds the five Modules of a config: architecture from ``model.*``, weights from a checkpoint or a seeded init."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import torch

from avatargen.config.schema import Config, WeightsSource
from avatargen.errors import CheckpointError
from avatargen.models.a2v_dit import A2VDiT
from avatargen.models.audio_encoder import AudioEncoder
from avatargen.models.sr_dit import SRDiT
from avatargen.models.text_encoder import TextEncoder
from avatargen.models.vae import VAE
from avatargen.modules import Module, ModuleSpec
from avatargen.runtime.offload import OffloadMonitor


@dataclass
class ModelSet:
    """The five modules of one model config, and the monitor of their placement (reset per render)."""

    audio_encoder: Module
    text_encoder: Module
    vae: Module
    a2v: Module
    sr: Module
    monitor: OffloadMonitor

    def all(self) -> list[Module]:
        return [self.audio_encoder, self.text_encoder, self.vae, self.a2v, self.sr]


def module_specs(config: Config) -> list[ModuleSpec]:
    m = config.model
    return [
        ModuleSpec("audio_encoder", lambda: AudioEncoder(m.audio_encoder)),
        ModuleSpec("text_encoder", lambda: TextEncoder(m.text_encoder)),
        ModuleSpec("vae", lambda: VAE(m.vae)),
        ModuleSpec("a2v", lambda: A2VDiT(m.a2v)),
        ModuleSpec("sr", lambda: SRDiT(m.sr)),
    ]


def shipped_checkpoint(name: str) -> Path:
    """The checkpoint shipped in the package for model config ``name``."""
    return Path(str(resources.files("avatargen"))) / "checkpoints" / name


def resolve_checkpoint(config: Config) -> Path:
    """``model.checkpoint`` or the shipped one; fails with the fix when neither exists."""
    if config.model.checkpoint:
        return Path(config.model.checkpoint).expanduser()
    path = shipped_checkpoint(config.model.name)
    if not path.exists():
        raise CheckpointError(
            f"no checkpoint is shipped for model '{config.model.name}'; set model.checkpoint=PATH, "
            "or model.weights=random for an untrained model (noise video, for tests)"
        )
    return path


def resolve_device(config: Config) -> torch.device:
    name = config.runtime.device.value
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise CheckpointError("runtime.device=cuda but no CUDA device is available; use runtime.device=cpu or auto")
    return torch.device(name)


def build_modules(config: Config, device: torch.device) -> ModelSet:
    """All five modules, loaded strictly (names and shapes checked) or randomly initialised from ``seed``, placed by
    ``runtime.offload`` with one shared monitor."""
    offload, resident_blocks = config.runtime.offload.value, config.runtime.offload_resident_blocks
    monitor = OffloadMonitor(offload, resident_blocks, device)
    specs = module_specs(config)
    if config.model.weights == WeightsSource.random:
        modules = [
            Module.random(spec, config.seed + i, device, offload, resident_blocks, monitor) for i, spec in enumerate(specs)
        ]
    else:
        checkpoint = resolve_checkpoint(config)
        modules = [Module.load(spec, checkpoint, device, offload, resident_blocks, monitor) for spec in specs]
    return ModelSet(*modules, monitor=monitor)
