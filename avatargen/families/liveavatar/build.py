"""Builds LiveAvatar's four Modules (the causal DiT, the Wan VAE, umT5, wav2vec2): each built on the meta device and
placed once, from the files as downloaded (``model.checkpoint`` + ``model.liveavatar.*``, the LoRA merged into each
DiT weight as it is read) or a seeded init. Every rank of a pipeline of steps builds all four whole; only the KV
rings (made per render, families/liveavatar/chunks.py) are its steps' alone."""

from __future__ import annotations

import glob
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from safetensors.torch import load_file
from torch import Tensor, nn

from avatargen.config.schema import Config, WeightsSource
from avatargen.errors import CheckpointError
from avatargen.families.liveavatar.config import LiveAvatarConfig, LiveAvatarModelConfig
from avatargen.families.liveavatar.models.dit import LiveAvatarDiT
from avatargen.families.liveavatar.models.lora import parse_peft
from avatargen.families.liveavatar.models.params import LiveAvatarParams, dit_params
from avatargen.families.wan.build import DTYPES, checkpoint_root, require_wan_extra
from avatargen.families.wan.models.params import UMT5Params, WanVAEParams, umt5_params, vae_params
from avatargen.families.wan.models.specs import WAV2VEC2_TINY
from avatargen.families.wan.models.umt5 import UMT5Encoder
from avatargen.families.wan.models.vae import WanVAE
from avatargen.families.wan.sources import folder_config, wav2vec2_names
from avatargen.families.wan.stages.text import ByteTokenizer, FolderTokenizer, Tokenizer
from avatargen.modules import Module
from avatargen.pipeline.parts import ModelPart
from avatargen.runtime.distributed import ParallelContext
from avatargen.runtime.layout import SplittableWork
from avatargen.runtime.offload import OffloadMonitor
from avatargen.runtime.pipeline_parallel import PipelineRanks
from avatargen.runtime.placement import RandomInit, Weights
from avatargen.runtime.precision import Precision
from avatargen.runtime.tensor_source import RenamedSource, TensorSource, files_of, pth_source, safetensors_files


@dataclass(frozen=True)
class LiveAvatarSpec:
    """The four architectures of one LiveAvatar model."""

    dit: LiveAvatarParams
    vae: WanVAEParams
    text_encoder: UMT5Params
    wav2vec2: dict[str, Any] = field(default_factory=dict)  # Wav2Vec2Config fields; {} = the folder's config.json


SPECS: dict[str, LiveAvatarSpec] = {
    "liveavatar": LiveAvatarSpec(dit_params("liveavatar"), vae_params("wan2_1"), umt5_params("umt5_xxl")),
    "liveavatar_tiny": LiveAvatarSpec(
        dit_params("liveavatar_tiny"),
        vae_params("wan_tiny", num_res_blocks=1),
        umt5_params("umt5_tiny", vocab_size=260),  # 256 bytes + pad, eos, unk, spare
        dict(WAV2VEC2_TINY, num_hidden_layers=24),  # 25 hidden states, as wav2vec2-large's
    ),
}


@dataclass
class LiveAvatarModels:
    """The four modules of one render, the prompt tokenizer, and the monitor of their placement."""

    spec: LiveAvatarSpec
    audio_encoder: Module
    text_encoder: Module
    vae: Module
    dit: Module
    tokenizer: Tokenizer
    monitor: OffloadMonitor
    precision: Precision
    stage: PipelineRanks | None = None  # this rank's stage of a pipeline of steps (runtime.pipeline_parallel), or None


class PeftMergedSource:
    """The DiT's shards with the peft LoRA merged into each weight as it is read (fp32 math, stored dtype back)."""

    def __init__(self, base: TensorSource, lora: dict[str, Tensor], alpha: float, label: str):
        self.base, self.alpha, self.label = base, alpha, f"{base.label} + {label}"
        pairs, replaced = parse_peft(lora)
        self.targets = set(pairs) | set(replaced)
        shapes = base.shapes()
        try:  # every target must exist with its shape, before any weight is read
            missing = sorted(name for name in self.targets if name not in shapes)
            if missing:
                raise ValueError(f"{len(missing)} LoRA targets not in the DiT (first: {missing[0]})")
            for name, (a, b) in pairs.items():
                if (b.shape[0], a.shape[1]) != tuple(shapes[name]):
                    raise ValueError(f"{name}: the LoRA gives {(b.shape[0], a.shape[1])}, the DiT has {tuple(shapes[name])}")
        except ValueError as error:
            raise CheckpointError(f"model.liveavatar.lora does not fit this DiT: {str(error)[:300]}") from error
        self.pairs, self.replaced = pairs, replaced

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return self.base.shapes()

    def read(self, name: str, rows: slice | None = None) -> Tensor:
        if name not in self.targets:
            return self.base.read(name, rows)
        weight = self.replaced[name] if name in self.replaced else self.base.read(name)
        if name in self.pairs:
            a, b = self.pairs[name]
            weight = (weight.float() + (self.alpha / a.shape[0]) * (b.float() @ a.float())).to(weight.dtype)
        return weight[rows] if rows is not None else weight


def dit_source(root: Path, la: LiveAvatarModelConfig) -> TensorSource:
    """``model.liveavatar.dit`` shards merged by name, with ``model.liveavatar.lora`` merged in."""
    paths = [path for pattern in la.dit for path in files_of(root, pattern, "model.liveavatar.dit")]
    source: TensorSource = safetensors_files(paths, " + ".join(la.dit))
    if la.lora is None:
        return source
    path = root / la.lora
    if not path.is_file():
        raise CheckpointError(f"model.liveavatar.lora: '{path}' does not exist; download Quark-Vision/Live-Avatar into "
                              f"{root / 'LiveAvatar'} (docs/liveavatar.md) or set model.liveavatar.lora=null")  # fmt: skip
    return PeftMergedSource(source, load_file(str(path)), la.lora_alpha, la.lora)


def wav2vec2_source(root: Path, la: LiveAvatarModelConfig) -> TensorSource:
    """wav2vec2-large-xlsr-53-english from its transformers folder (``model.safetensors`` or ``pytorch_model.bin``)."""
    folder = root / la.wav2vec2
    for name in ("model.safetensors", "pytorch_model.bin"):
        path = folder / name
        if path.is_file():
            if name.endswith("safetensors"):
                base: TensorSource = safetensors_files([path], str(path))
            else:
                base = pth_source(folder, name, "model.liveavatar.wav2vec2")
            return RenamedSource(base, wav2vec2_names(list(base.shapes())))
    raise CheckpointError(f"model.liveavatar.wav2vec2: '{folder}' has no model.safetensors or pytorch_model.bin; "
                          "download Wan2.2-S2V-14B whole (docs/liveavatar.md)")  # fmt: skip


def _wav2vec2_config(spec: LiveAvatarSpec, root: Path | None, la: LiveAvatarModelConfig):
    from avatargen.families.wan.models.wav2vec2 import wav2vec2_config

    path = None if root is None else root / la.wav2vec2 / "config.json"
    folder = None if path is None else folder_config(path, f"model.liveavatar.wav2vec2: '{path}'")
    return wav2vec2_config(spec, folder or dict(num_hidden_layers=24, hidden_size=1024, num_attention_heads=16,
                                                intermediate_size=4096, feat_extract_norm="layer",
                                                do_stable_layer_norm=True, conv_bias=True))  # fmt: skip


LIVEAVATAR_MODULES = ("audio_encoder", "text_encoder", "vae", "dit")  # in build order


def model_parts(config: Config) -> list[ModelPart]:
    """The four parts, in build order (names and shapes checked before any weight is read)."""
    model = config.model
    assert isinstance(model, LiveAvatarConfig)
    la = model.liveavatar
    spec = SPECS[la.spec]
    require_wan_extra(config)
    from avatargen.families.wan.models.wav2vec2 import Wav2Vec2Encoder

    root = None if model.weights == WeightsSource.random else checkpoint_root(config)
    run = DTYPES[la.dtype]
    audio_config = _wav2vec2_config(spec, root, la)

    def part(index: int, name: str, build: Callable[[], nn.Module], source: Callable[[], Weights], dtype: torch.dtype,
             streamed: bool) -> ModelPart:  # fmt: skip
        weights = (lambda: RandomInit(config.seed + index)) if root is None else source
        return ModelPart(name, build, weights, streamed=streamed, dtype=dtype, compute_dtype=torch.float32)

    return [
        part(0, "audio_encoder", lambda: Wav2Vec2Encoder(audio_config), lambda: wav2vec2_source(root, la), torch.float32, False),
        part(1, "text_encoder", lambda: UMT5Encoder(spec.text_encoder), lambda: pth_source(root, la.text_encoder, "model.liveavatar.text_encoder"), run, True),
        part(2, "vae", lambda: WanVAE(spec.vae), lambda: pth_source(root, la.vae, "model.liveavatar.vae"), torch.float32, False),
        part(3, "dit", lambda: LiveAvatarDiT(spec.dit), lambda: dit_source(root, la), run, True),
    ]  # fmt: skip


def liveavatar_precision(config: Config, device: torch.device, parallel: ParallelContext) -> Precision:
    return Precision(DTYPES[config.model.liveavatar.dtype], "model.liveavatar.dtype")


def model_set(config: Config, modules: dict[str, Module], monitor: OffloadMonitor, precision: Precision,
              parallel: ParallelContext) -> LiveAvatarModels:  # fmt: skip
    """The placed modules with the prompt tokenizer and this rank's pipeline stage."""
    la = config.model.liveavatar
    spec = SPECS[la.spec]
    root = None if config.model.weights == WeightsSource.random else checkpoint_root(config)
    length = spec.dit.text_len
    if la.tokenizer is None or root is None:
        tokenizer: Tokenizer = ByteTokenizer(length)
    else:
        folder = root / la.tokenizer
        if not folder.is_dir():
            raise CheckpointError(f"model.liveavatar.tokenizer: '{folder}' does not exist; download Wan2.2-S2V-14B whole")
        tokenizer = FolderTokenizer(folder, length, "model.liveavatar.tokenizer")
    return LiveAvatarModels(spec, *(modules[name] for name in LIVEAVATAR_MODULES), tokenizer=tokenizer,
                            monitor=monitor, precision=precision, stage=parallel.pipeline_ranks)  # fmt: skip


def parallel_work(config: Config) -> SplittableWork:
    """What a render's ranks can split: its denoising steps (each with its own KV ring) as pipeline stages; its
    tokens and guidance are not split (no guidance branch; the DiT has no token sequence to cut)."""
    model = config.model
    assert isinstance(model, LiveAvatarConfig)
    return SplittableWork(pipeline_steps=model.liveavatar.sampling_steps)


def weight_files(config: Config) -> list[Path]:
    """The files a render reads under ``model.checkpoint`` (none for random weights)."""
    model = config.model
    if model.weights == WeightsSource.random or not model.checkpoint:
        return []
    assert isinstance(model, LiveAvatarConfig)
    root, la = Path(model.checkpoint).expanduser(), model.liveavatar
    patterns = [*la.dit, la.vae, la.text_encoder, f"{la.wav2vec2}/*", *([la.lora] if la.lora else [])]
    files = {Path(p) for pattern in patterns for p in glob.glob(str(root / pattern))}
    return sorted(path for path in files if path.is_file())
