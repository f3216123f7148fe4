"""The five models of a Wan-family model as parts: each built on the meta device and placed once
(avatargen/pipeline/parts.py), from the downloaded files (``model.checkpoint`` + ``model.wan.*``) or a seeded init
where its weights live; ``model_set`` wraps them with the prompt tokenizer."""

from __future__ import annotations

import glob
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from avatargen.config.schema import Config, WeightsSource
from avatargen.families.wan.config import WanConfig, WanModelConfig
from avatargen.errors import CheckpointError, MissingExtraError
from avatargen.families.wan.models.clip_vision import CLIPVisionTower
from avatargen.families.wan.models.dit import WanDiT
from avatargen.families.wan.models.specs import WanFamilySpec, family_spec
from avatargen.families.wan.models.umt5 import UMT5Encoder
from avatargen.families.wan.models.vae import WanVAE
from avatargen.modules import Module
from avatargen.pipeline.parts import ModelPart
from avatargen.runtime.distributed import ParallelContext
from avatargen.runtime.guidance import GuidanceSplit
from avatargen.runtime.layout import SplittableWork
from avatargen.runtime.offload import OffloadMonitor
from avatargen.runtime.precision import Precision
from avatargen.runtime.placement import RandomInit, Weights
from avatargen.families.wan.sources import dit_source, wav2vec2_folder_config, wav2vec2_source
from avatargen.runtime.tensor_source import pth_source
from avatargen.families.wan.stages.sampler import Guidance, guidance_passes
from avatargen.families.wan.stages.text import Tokenizer, tokenizer_for

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
WAN_MODULES = ("audio_encoder", "text_encoder", "image_encoder", "vae", "dit")  # in build order
WAN_EXTRA = "pip install 'avatargen[wan]'"


def require_wan_extra(config: Config) -> None:
    """MissingExtraError (exit 2, one line) when the ``wan`` extra is not installed: transformers runs wav2vec2 and
    the umT5 tokenizer. Imported here, at build time: a config check (``avatargen config``) never needs it."""
    try:
        import transformers  # noqa: F401
    except ModuleNotFoundError as error:
        if error.name != "transformers" and not str(error.name or "").startswith("transformers."):
            raise
        raise MissingExtraError(
            f"model={config.model.name} needs transformers (wav2vec2 and the umT5 tokenizer), which is not installed: "
            f"{WAN_EXTRA}"
        ) from None


@dataclass
class WanModelSet:
    """The five Wan modules of one render, the prompt tokenizer, and the monitor of their placement."""

    spec: WanFamilySpec
    audio_encoder: Module  # wav2vec2
    text_encoder: Module  # umT5
    image_encoder: Module  # CLIP vision tower
    vae: Module
    dit: Module
    tokenizer: Tokenizer
    monitor: OffloadMonitor
    precision: Precision  # the DiT's run dtype (model.wan.dtype; runtime.dtype is for avatargen's own models)
    guidance: GuidanceSplit = field(default_factory=GuidanceSplit)  # which guidance passes of a step run here

    def all(self) -> list[Module]:
        return [self.audio_encoder, self.text_encoder, self.image_encoder, self.vae, self.dit]


def checkpoint_root(config: Config) -> Path:
    """``model.checkpoint``: the folder every ``model.wan.*`` path is relative to."""
    if not config.model.checkpoint:
        raise CheckpointError(
            f"model={config.model.name} needs model.checkpoint=DIR (the weights/ folder of docs/models.md), "
            "or model.weights=random for an untrained model (noise video, for tests and benchmarks)"
        )
    root = Path(config.model.checkpoint).expanduser()
    if not root.is_dir():
        raise CheckpointError(f"model.checkpoint '{root}' is not a folder; point it at the downloaded weights/ folder")
    return root


def wan_parts(config: Config, root: Path | None) -> list[ModelPart]:
    """The five parts in build order (``root`` None: seeded random weights)."""
    wan: WanModelConfig = config.model.wan
    spec = family_spec(wan.spec)
    run = DTYPES[wan.dtype.value]
    folder = wav2vec2_folder_config(root, wan) if root is not None else None
    # transformers takes seconds to import: only a build reads it, never a config check (``avatargen config``)
    require_wan_extra(config)
    from avatargen.families.wan.models.wav2vec2 import Wav2Vec2Encoder, wav2vec2_config

    audio_config = wav2vec2_config(spec, folder)

    def weights(index: int, source: Callable[[], Any]) -> Callable[[], Weights]:
        return (lambda: RandomInit(config.seed + index)) if root is None else source

    def pth(key: str, prefix: str = "") -> Callable[[], Any]:
        return lambda: pth_source(root, getattr(wan, key), f"model.wan.{key}", prefix)

    def part(name: str, build: Callable[[], nn.Module], weights: Callable[[], Any], dtype: torch.dtype,
             streamed: bool) -> ModelPart:  # fmt: skip
        # its weights in ``dtype``; its forwards as they are (the Wan stages cast themselves: model.wan.dtype)
        return ModelPart(name, build, weights, streamed=streamed, dtype=dtype, compute_dtype=torch.float32)

    return [
        part("audio_encoder", lambda: Wav2Vec2Encoder(audio_config),
             weights(0, lambda: wav2vec2_source(root, wan)), torch.float32, streamed=False),
        part("text_encoder", lambda: UMT5Encoder(spec.text_encoder), weights(1, pth("text_encoder")), run, streamed=True),
        part("image_encoder", lambda: CLIPVisionTower(spec.image_encoder),
             weights(2, pth("image_encoder", wan.image_encoder_prefix)), run, streamed=False),
        part("vae", lambda: WanVAE(spec.vae), weights(3, pth("vae")), torch.float32, streamed=False),
        part("dit", lambda: WanDiT(spec.dit, wan.fp32_time_head), weights(4, lambda: dit_source(root, wan)), run,
             streamed=True),
    ]  # fmt: skip


def model_parts(config: Config) -> list[ModelPart]:
    """The five parts of ``config``'s model (its downloaded files checked for a folder first)."""
    return wan_parts(config, None if config.model.weights == WeightsSource.random else checkpoint_root(config))


def wan_precision(config: Config, device: torch.device, parallel: ParallelContext) -> Precision:
    """The DiT's run dtype: ``model.wan.dtype`` (``runtime.dtype`` is for avatargen's own models)."""
    return Precision(DTYPES[config.model.wan.dtype.value], "model.wan.dtype")


def model_set(config: Config, modules: dict[str, Module], monitor: OffloadMonitor, precision: Precision,
              parallel: ParallelContext) -> WanModelSet:  # fmt: skip
    """The placed modules with the prompt tokenizer and this rank's guidance passes."""
    root = None if config.model.weights == WeightsSource.random else checkpoint_root(config)
    spec = family_spec(config.model.wan.spec)
    tokenizer = tokenizer_for(config.model.wan, root, spec.dit.text_len)
    return WanModelSet(spec, *(modules[name] for name in WAN_MODULES), tokenizer=tokenizer, monitor=monitor,
                       precision=precision, guidance=parallel.guidance_split())  # fmt: skip


def parallel_work(config: Config) -> SplittableWork:
    """What one Wan render can split over torchrun's ranks: its DiT's tokens (Ulysses), and the 2 or 3 guidance
    passes of each sampling step."""
    wan = config.model.wan
    passes = guidance_passes(Guidance(wan.text_guide_scale, wan.audio_guide_scale))
    return SplittableWork(guidance_passes=passes, sequence=True)


def weight_files(config: Config) -> list[Path]:
    """The files a render of ``config`` reads under ``model.checkpoint`` (none for random weights; a pattern that
    matches nothing is reported when the models load)."""
    if config.model.weights == WeightsSource.random or not config.model.checkpoint:
        return []
    model = config.model
    assert isinstance(model, WanConfig)
    root, wan = Path(model.checkpoint).expanduser(), model.wan
    patterns = [*wan.dit, wan.vae, wan.text_encoder, wan.image_encoder, f"{wan.wav2vec2}/*"]
    files = {Path(p) for pattern in patterns for p in glob.glob(str(root / pattern))}
    files |= {Path(file).expanduser() for file in wan.lora}
    return sorted(path for path in files if path.is_file())
