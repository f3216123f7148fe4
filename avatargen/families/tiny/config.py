"""The typed ``model.*`` keys of the bundled model family (``model=tiny``) and the checks across them.

Its five sections are the architecture dataclasses of its models; it also reads the ``pipeline.*`` chunk keys, which
are checked here against each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

import yaml

from avatargen.config.families import FamilyConfig
from avatargen.config.schema import Config, ModelConfig
from avatargen.config.validate import MAX_SAMPLE_RATE, numbers, require_in
from avatargen.errors import ConfigError, first_line
from avatargen.families.tiny.params import (A2VDiTParams, AudioEncoderParams, SRDiTParams, TextEncoderParams,
                                            VAEParams)

MAX_LAYERS = 256  # depth-like keys: far past any CPU model, and a meta build stays instant
DEPTH_KEYS = ("depth", "face_depth", "layers", "blocks_per_level")
MAX_MODEL_SIZE = 16_384  # any other width, length or count of the five models but their sample rate
MAX_MODEL_PARAMETERS = 2**33  # 8.6 G parameters (34 GB in float32): a thousand times the shipped model's 14 M
MAY_BE_ZERO = ("audio_window",)  # counts that may be 0 besides the depth-like DEPTH_KEYS
COMPOSITED_MOTION_FRAMES = 2  # the count the training recipe conditions its windows on
INTERPOLATES = True  # pipeline.interpolate=null runs I chunks
MODEL_NAMES = ("audio_encoder", "text_encoder", "vae", "a2v", "sr")  # its five models' sections, in the order they load
SHIPPED_CHECKPOINTS = {"tiny": Path(__file__).with_name("checkpoint")}  # model option -> its folder in the package
# A live render (--realtime with --audio -) renders for latency: small causal chunks (pipeline=live), catching up to
# 0.3 s behind the voice, a 0.2-s output buffer (the jitter of a 4-frame chunk's emission on a 2-core CPU: docs/live.md)
LIVE_OVERRIDES = ("pipeline=live", "output.realtime_target_s=0.3", "output.realtime_buffer_s=0.2")


@dataclass
class TinyModelConfig(ModelConfig):
    """The five models of the bundled family and their checkpoint (``fps``, ``image_size`` and ``sample_rate`` are
    checked against the sub-models' own values)."""

    name: str = "tiny"
    family: str = "tiny"
    audio_encoder: AudioEncoderParams = field(default_factory=AudioEncoderParams)
    text_encoder: TextEncoderParams = field(default_factory=TextEncoderParams)
    vae: VAEParams = field(default_factory=VAEParams)
    a2v: A2VDiTParams = field(default_factory=A2VDiTParams)
    sr: SRDiTParams = field(default_factory=SRDiTParams)


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


# Architecture keys added after checkpoints were trained without them: the value such a checkpoint was trained for.
LEGACY_ARCHITECTURE = {("a2v", "attention"): "full", ("vae", "decoder_widths"): None}


def checkpoint_architecture(folder: Path) -> dict[tuple[str, str], object] | None:
    """What a checkpoint folder's weights were trained for, for each key of ``LEGACY_ARCHITECTURE``, from the
    ``model.yaml`` that ``avatargen train`` writes beside them (the legacy value where that file predates the key), or
    None where the folder has none."""
    path = folder / "model.yaml"
    if not path.is_file():
        return None
    try:  # libyaml's loader where PyYAML has it: ~2 ms against OmegaConf's ~20-30 ms, part of the first frame's wait
        trained = yaml.load(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except Exception:  # not ours to judge: the weights are checked when they load
        return None
    if not isinstance(trained, dict):
        return None
    return {(section, key): (trained.get(section) or {}).get(key, legacy)
            for (section, key), legacy in LEGACY_ARCHITECTURE.items()}  # fmt: skip


def trained_vae_params(folder: Path, params: VAEParams) -> VAEParams:
    """``params`` with the decoder widths the checkpoint folder's VAE was trained with (its model.yaml; the legacy
    value, a decoder as wide as the encoder, where the file predates the key; ``params``' own without a model.yaml)."""
    trained = checkpoint_architecture(folder)
    return replace(params, decoder_widths=trained[("vae", "decoder_widths")]) if trained else params


def _as_override(value: object) -> str:
    """A config value as a ``key=value`` override writes it: null, true, 48,32,16 in brackets, full."""
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_as_override(item) for item in value) + "]"
    return str(value).lower()


def check_checkpoint_architecture(config: Config, folder: Path) -> None:
    """A checkpoint trained for one variant of an architecture key must not run with the other (its frames would be
    noise, though every weight's name and shape fit)."""
    trained = checkpoint_architecture(folder) if folder.is_dir() else None
    for (section, key), value in (trained or {}).items():
        wanted = getattr(getattr(config.model, section), key)
        if value != wanted:
            setting = f"model.{section}.{key}={_as_override(value)}"
            typed = f"'{setting}'" if "[" in setting else setting  # as a shell takes it
            raise ConfigError(f"model.checkpoint={folder} was trained with {setting}, the config says "
                              f"{_as_override(wanted)}; add {typed}")  # fmt: skip


def motion_frames_for(config: Config, composited: bool | None = None) -> int:
    """``pipeline.motion_frames``, or when it is null the default for what the video is: 2 where the model's frames
    are composited into the reference (only the mouth reaches the video, and it holds over 10 minutes), 0 where the
    video is the model's own square, which drifts when each chunk is conditioned on the last (docs/model-card.md,
    "Boundary-frame conditioning"). ``composited`` None: as configured (``pipeline.composite``); a render knows
    better (no face found: not composited) and says so."""
    if config.pipeline.motion_frames is not None:
        return config.pipeline.motion_frames
    if composited is None:
        composited = config.pipeline.composite
    return COMPOSITED_MOTION_FRAMES if composited else 0


def validate_tiny(config: Config) -> None:
    """Raise ConfigError naming the first inconsistent ``model.*`` or ``pipeline.*`` key the bundled family reads."""
    p, m = config.pipeline, config.model
    assert isinstance(m, TinyModelConfig)
    for key, value in numbers(m):
        if key.split(".")[0] in MODEL_NAMES and isinstance(value, int) and key.split(".")[-1] not in DEPTH_KEYS:
            low = 0 if key.split(".")[-1] in MAY_BE_ZERO else 1  # a width or size of 0 builds, then fails mid-render
            require_in(value, low, MAX_SAMPLE_RATE if key.endswith("sample_rate") else MAX_MODEL_SIZE, f"model.{key}")
    _require(p.motion_frames is None or 0 <= p.motion_frames < p.n_chunk_frames,
             "pipeline.motion_frames must be null or in [0, pipeline.n_chunk_frames)")  # fmt: skip
    if p.interpolates(INTERPOLATES):
        _require(
            p.seam_frames >= 1 and p.anchor_frames >= 1,
            "pipeline.seam_frames and pipeline.anchor_frames must be >= 1 when pipeline.interpolate=true",
        )
        _require(
            p.seam_frames + 2 * p.anchor_frames <= p.n_chunk_frames,
            f"pipeline.seam_frames + 2 * pipeline.anchor_frames ({p.seam_frames + 2 * p.anchor_frames}) must be <= "
            f"pipeline.n_chunk_frames ({p.n_chunk_frames}) so neighbouring seams do not overlap",
        )
    _require(m.text_encoder.max_tokens >= 2, "model.text_encoder.max_tokens must be >= 2 (room for BOS and EOS)")
    _require(m.audio_encoder.fps == m.fps, f"model.audio_encoder.fps ({m.audio_encoder.fps}) must equal model.fps ({m.fps})")
    _require(
        m.audio_encoder.sample_rate == m.sample_rate,
        f"model.audio_encoder.sample_rate ({m.audio_encoder.sample_rate}) must equal model.sample_rate ({m.sample_rate})",
    )
    _require(m.a2v.audio_dim == m.audio_encoder.out_dim, "model.a2v.audio_dim must equal model.audio_encoder.out_dim")
    _require(m.a2v.text_dim == m.text_encoder.dim, "model.a2v.text_dim must equal model.text_encoder.dim")
    for name, dit in (("a2v", m.a2v), ("sr", m.sr)):  # an MLP of width 0 builds, then warns on every render
        _require(int(dit.dim * dit.mlp_ratio) >= 1 and dit.mlp_ratio <= 64,
                 f"model.{name}.mlp_ratio must give an MLP of 1 to 64 x model.{name}.dim units, got {dit.mlp_ratio:g}")  # fmt: skip
    factor = 2 ** len(m.vae.widths)
    _require(
        m.image_size == m.sr.high_size * factor,
        f"model.image_size ({m.image_size}) must equal model.sr.high_size x {factor} (the VAE's spatial factor)",
    )
    _require(m.sr.high_size == 2 * m.sr.low_size, "model.sr.high_size must be 2 x model.sr.low_size")
    _require(m.a2v.latent_size == m.sr.low_size, "model.a2v.latent_size must equal model.sr.low_size")
    channels = {m.vae.latent_channels, m.a2v.latent_channels, m.sr.latent_channels}
    _require(len(channels) == 1, "model.vae/a2v/sr latent_channels must all be equal")
    _validate_model_shapes(m)


def _validate_model_shapes(model: TinyModelConfig) -> None:
    """Every model must be buildable from its keys: heads >= 1, then each model whose keys differ from the shipped
    ones is built on the meta device (no memory, no weights), so a shape the architecture rejects fails here, naming
    its section, not while loading. The shipped sections build: a config that keeps them imports no torch."""
    defaults = TinyModelConfig()
    changed = [name for name in MODEL_NAMES if getattr(model, name) != getattr(defaults, name)]
    for name in changed:
        section = getattr(model, name)
        if isinstance(getattr(section, "heads", None), int):
            _require(section.heads >= 1, f"model.{name}.heads must be >= 1")
        for key in DEPTH_KEYS:
            value = getattr(section, key, None)
            if isinstance(value, int):
                _require(0 <= value <= MAX_LAYERS, f"model.{name}.{key} must be in [0, {MAX_LAYERS}], got {value}")
    if not changed:
        return
    from avatargen.families.tiny.models import MODEL_CLASSES  # torch: only for a model config of one's own
    from avatargen.models.meta import build_on_meta

    for name in changed:
        try:
            built = build_on_meta(partial(MODEL_CLASSES[name], getattr(model, name)))
        except (ValueError, ZeroDivisionError, TypeError, RuntimeError, IndexError, OverflowError, MemoryError) as error:
            reason = first_line(error)  # torch appends a C++ trace
            raise ConfigError(
                f"model.{name} cannot be built from its config ({reason[:200]}); fix the model.{name}.* keys, or use "
                "the model config its checkpoint was trained with"
            ) from None
        count = sum(t.numel() for t in built.state_dict().values())
        _require(count <= MAX_MODEL_PARAMETERS, f"model.{name} would have {count:,} parameters, over the limit of "
                 f"{MAX_MODEL_PARAMETERS:,}; fix the model.{name}.* keys")  # fmt: skip


FAMILY = FamilyConfig(
    name="tiny",
    model_config=TinyModelConfig,
    engine="avatargen.families.tiny.engine:ENGINE",
    validate=validate_tiny,
    overlap=True,
    live_overrides=LIVE_OVERRIDES,
    recipe="avatargen.families.tiny.train.config:load_recipe",
)
