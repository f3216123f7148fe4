"""Checks across keys that a per-key type check cannot see (run once, before any work starts)."""

from __future__ import annotations

import dataclasses
import math
from functools import partial
from typing import Any

from avatargen.config.schema import Config, Offload, interpolates
from avatargen.config.wan import validate_wan_model
from avatargen.compose.idle_motion import IdleMotionSettings
from avatargen.errors import ConfigError

MAX_THREADS = 1024  # far past any machine's cores; torch segfaults creating ~100,000 threads
MAX_GOP_SECONDS = 60.0  # x264 rejects keyframe intervals near 2^31 frames; a minute is already a lot to lose on a kill

MAX_LAYERS = 256  # depth-like keys of the native models: far past any CPU model, and a meta build stays instant
DEPTH_KEYS = ("depth", "face_depth", "layers", "blocks_per_level")
MIN_MAX_SIDE, MAX_MAX_SIDE = 64, 4096  # a face needs pixels; x264's level limits and memory end past 4K

X264_PRESETS = ("ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower", "veryslow")

# Upper bounds past any useful value, so that no number reaches an allocation, a clock or a C integer that overflows
MAX_SEED = 2**63 - 1  # torch and numpy generators take 64-bit seeds
MAX_SAMPLING_STEPS = 1000
MAX_CHUNK_FRAMES = 1024  # 41 s of video in one chunk: its latents and activations are held at once
MAX_AUDIO_BLOCK_S = 60.0
MAX_BUFFER_S = 3600.0  # seconds a live output may lag (realtime buffer), or a network peer may stay silent
MAX_DIST_TIMEOUT_S = 7 * 86400.0
MAX_FPS, MAX_SAMPLE_RATE, MAX_IMAGE_SIZE = 240, 384_000, 4096
MAX_MODEL_SIZE = 16_384  # any width, length or count of avatargen's own models but their sample rate
MAX_MODEL_PARAMETERS = 2**33  # 8.6 G parameters (34 GB in float32): a thousand times the shipped model's 14 M
NATIVE_MODELS = ("audio_encoder", "text_encoder", "vae", "a2v", "sr")
MAY_BE_ZERO = ("audio_window",)  # counts of avatargen's own models that may be 0 besides the depth-like DEPTH_KEYS


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


def _numbers(node: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted key, value) of every number in a config section, list items included (``model.vae.widths[1]``)."""
    found: list[tuple[str, Any]] = []
    for field in dataclasses.fields(node):
        value, key = getattr(node, field.name), f"{prefix}{field.name}"
        if dataclasses.is_dataclass(value):
            found += _numbers(value, f"{key}.")
        elif isinstance(value, (list, tuple)):
            found += [(f"{key}[{i}]", item) for i, item in enumerate(value) if isinstance(item, (int, float))]
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            found.append((key, value))
    return found


def _require_in(value: float, low: float, high: float, key: str, unit: str = "") -> None:
    shown = lambda number: f"{number:g}" if isinstance(number, float) else str(number)  # noqa: E731
    _require(low <= value <= high, f"{key} must be in [{shown(low)}, {shown(high)}]{unit}, got {shown(value)[:40]}")


def _check_numbers(config: Config) -> None:
    """Every number finite; the keys that size memory, time or a C integer within bounds (one line naming the key)."""
    for key, value in _numbers(config):
        _require(not isinstance(value, float) or math.isfinite(value), f"{key} must be a finite number, got {value}")
    p, m, o = config.pipeline, config.model, config.output
    _require_in(config.seed, 0, MAX_SEED, "seed")
    _require_in(p.n_chunk_frames, 1, MAX_CHUNK_FRAMES, "pipeline.n_chunk_frames")
    _require_in(p.seam_frames, 0, MAX_CHUNK_FRAMES, "pipeline.seam_frames")
    _require_in(p.anchor_frames, 0, MAX_CHUNK_FRAMES, "pipeline.anchor_frames")
    _require_in(p.sampling_steps, 1, MAX_SAMPLING_STEPS, "pipeline.sampling_steps")
    _require(0 < p.audio_block_s <= MAX_AUDIO_BLOCK_S, f"pipeline.audio_block_s must be in (0, {MAX_AUDIO_BLOCK_S:g}] (seconds)")
    _require_in(m.fps, 1, MAX_FPS, "model.fps")
    _require_in(m.sample_rate, 1, MAX_SAMPLE_RATE, "model.sample_rate")
    _require_in(m.image_size, 2, MAX_IMAGE_SIZE, "model.image_size")
    _require_in(o.realtime_buffer_s, 0, MAX_BUFFER_S, "output.realtime_buffer_s", " (seconds)")
    _require(0 < o.publish_timeout_s <= MAX_BUFFER_S, f"output.publish_timeout_s must be in (0, {MAX_BUFFER_S:g}] (seconds)")
    _require_in(o.hls_window, 0, 1_000_000, "output.hls_window", " (0 = keep every segment)")
    _require(0 < config.runtime.dist_timeout_s <= MAX_DIST_TIMEOUT_S,
             f"runtime.dist_timeout_s must be in (0, {MAX_DIST_TIMEOUT_S:g}] (seconds)")  # fmt: skip
    _require_in(config.runtime.offload_resident_blocks, 1, MAX_LAYERS, "runtime.offload_resident_blocks")
    if m.wan is None:
        for key, value in _numbers(m):
            if key.split(".")[0] in NATIVE_MODELS and isinstance(value, int) and key.split(".")[-1] not in DEPTH_KEYS:
                low = 0 if key.split(".")[-1] in MAY_BE_ZERO else 1  # a width or size of 0 builds, then fails mid-render
                _require_in(value, low, MAX_SAMPLE_RATE if key.endswith("sample_rate") else MAX_MODEL_SIZE, f"model.{key}")


def validate_config(config: Config) -> None:
    """Raise ConfigError naming the first inconsistent key."""
    _check_numbers(config)
    p, m, o = config.pipeline, config.model, config.output
    _require(p.n_chunk_frames >= 1, "pipeline.n_chunk_frames must be >= 1")
    _require(p.motion_frames is None or 0 <= p.motion_frames < p.n_chunk_frames,
             "pipeline.motion_frames must be null or in [0, pipeline.n_chunk_frames)")  # fmt: skip
    _require(p.seam_frames >= 0 and p.anchor_frames >= 0, "pipeline.seam_frames and pipeline.anchor_frames must be >= 0")
    if interpolates(config) and m.wan is None:  # a Wan model has its own seam sizes (model.wan.*)
        _require(
            p.seam_frames >= 1 and p.anchor_frames >= 1,
            "pipeline.seam_frames and pipeline.anchor_frames must be >= 1 when pipeline.interpolate=true",
        )
        _require(
            p.seam_frames + 2 * p.anchor_frames <= p.n_chunk_frames,
            f"pipeline.seam_frames + 2 * pipeline.anchor_frames ({p.seam_frames + 2 * p.anchor_frames}) must be <= "
            f"pipeline.n_chunk_frames ({p.n_chunk_frames}) so neighbouring seams do not overlap",
        )
    _require(p.sampling_steps >= 1, "pipeline.sampling_steps must be >= 1")
    _require(p.sampling_shift > 0, "pipeline.sampling_shift must be > 0")
    _require(p.audio_block_s > 0, "pipeline.audio_block_s must be > 0")
    idle_motion_settings(config)  # ConfigError naming the pipeline.idle_motion key out of range

    _require(m.fps >= 1, "model.fps must be >= 1")
    _require(m.sample_rate >= 1 and m.sample_rate % m.fps == 0,
             f"model.sample_rate ({m.sample_rate}) must be a positive multiple of model.fps ({m.fps})")  # fmt: skip
    _require(m.image_size >= 2 and m.image_size % 2 == 0, "model.image_size must be even and >= 2 (H.264 yuv420p)")
    if m.wan is not None:
        validate_wan_model(m)  # a Wan-family model: its own specs (the five native sub-models are unused)
    else:
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
    _require(0 <= o.crf <= 51, "output.crf must be in [0, 51]")
    _require(MIN_MAX_SIDE <= o.max_side <= MAX_MAX_SIDE, f"output.max_side must be in [{MIN_MAX_SIDE}, {MAX_MAX_SIDE}] (pixels of the long side)")
    _require(o.preset in X264_PRESETS, f"output.preset '{o.preset}' is not an x264 preset; valid choices: {', '.join(X264_PRESETS)}")
    _require(0 < o.gop_seconds <= MAX_GOP_SECONDS, f"output.gop_seconds must be in (0, {MAX_GOP_SECONDS:g}] (seconds between keyframes)")
    _require(o.publish_timeout_s > 0, "output.publish_timeout_s must be > 0 (seconds)")
    _require(o.hls_window >= 0, "output.hls_window must be >= 0 (0 = keep every segment)")
    _require(o.realtime_buffer_s >= 0, "output.realtime_buffer_s must be >= 0 (seconds)")
    _require(0 <= config.runtime.threads <= MAX_THREADS, f"runtime.threads must be in [0, {MAX_THREADS}] (0 = torch's default)")
    _require(config.runtime.dist_timeout_s > 0, "runtime.dist_timeout_s must be > 0 (seconds)")
    _require(not (config.runtime.overlap and config.runtime.offload != Offload.none),
             "runtime.overlap=true needs runtime.offload=none (two threads would move models in and out at once); "
             "set runtime.overlap=null")  # fmt: skip
    _require(config.runtime.offload_resident_blocks >= 1, "runtime.offload_resident_blocks must be >= 1 (blocks on the device at once)")
    if m.wan is None:
        _validate_model_shapes(config)


def _validate_model_shapes(config: Config) -> None:
    """Every model must be buildable from its keys: heads >= 1, then each model is built on the meta device (no memory,
    no weights), so a shape the architecture rejects fails here, naming its section, not in the middle of loading."""
    from avatargen.models import MODEL_CLASSES
    from avatargen.models.meta import build_on_meta

    for name in (f.name for f in dataclasses.fields(config.model)):
        section = getattr(config.model, name)
        if dataclasses.is_dataclass(section) and isinstance(getattr(section, "heads", None), int):
            _require(section.heads >= 1, f"model.{name}.heads must be >= 1")
        for key in DEPTH_KEYS:
            value = getattr(section, key, None) if dataclasses.is_dataclass(section) else None
            if isinstance(value, int):
                _require(0 <= value <= MAX_LAYERS, f"model.{name}.{key} must be in [0, {MAX_LAYERS}]")
    for name, model_class in MODEL_CLASSES.items():
        try:
            model = build_on_meta(partial(model_class, getattr(config.model, name)))
        except (ValueError, ZeroDivisionError, TypeError, RuntimeError, IndexError, OverflowError, MemoryError) as error:
            reason = (str(error).strip().splitlines() or [error.__class__.__name__])[0]  # torch appends a C++ trace
            raise ConfigError(
                f"model.{name} cannot be built from its config ({reason[:200]}); fix the model.{name}.* keys, or use "
                "the model config its checkpoint was trained with"
            ) from None
        count = sum(t.numel() for t in model.state_dict().values())
        _require(count <= MAX_MODEL_PARAMETERS, f"model.{name} would have {count:,} parameters, over the limit of "
                 f"{MAX_MODEL_PARAMETERS:,}; fix the model.{name}.* keys")  # fmt: skip


def idle_motion_settings(config: Config) -> IdleMotionSettings:
    """``pipeline.idle_motion`` as the settings the idle motion runs with (ConfigError naming a key out of range)."""
    return IdleMotionSettings(**dataclasses.asdict(config.pipeline.idle_motion))
