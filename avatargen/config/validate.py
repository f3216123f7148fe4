"""Checks across keys that a per-key type check cannot see (run once, before any work starts)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from avatargen.compose.idle_settings import IdleMotionSettings
from avatargen.config.families import FamilyConfig
from avatargen.config.schema import Config, Offload
from avatargen.errors import ConfigError

MAX_THREADS = 1024  # far past any machine's cores; torch segfaults creating ~100,000 threads
MAX_GOP_SECONDS = 60.0  # x264 rejects keyframe intervals near 2^31 frames; a minute is already a lot to lose on a kill
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
MAX_RESIDENT_BLOCKS = 256


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


def numbers(node: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted key, value) of every number in a config section, list items included (``model.vae.widths[1]``)."""
    found: list[tuple[str, Any]] = []
    for field in dataclasses.fields(node):
        value, key = getattr(node, field.name), f"{prefix}{field.name}"
        if dataclasses.is_dataclass(value):
            found += numbers(value, f"{key}.")
        elif isinstance(value, (list, tuple)):
            found += [(f"{key}[{i}]", item) for i, item in enumerate(value) if isinstance(item, (int, float))]
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            found.append((key, value))
    return found


def require_in(value: float, low: float, high: float, key: str, unit: str = "") -> None:
    """ConfigError naming ``key`` unless ``low <= value <= high``."""
    shown = lambda number: f"{number:g}" if isinstance(number, float) else str(number)  # noqa: E731
    _require(low <= value <= high, f"{key} must be in [{shown(low)}, {shown(high)}]{unit}, got {shown(value)[:40]}")


def _check_numbers(config: Config) -> None:
    """Every number finite; the shared keys that size memory, time or a C integer within bounds (one line naming the
    key). A family bounds its own ``model.*`` keys (``family.validate``)."""
    for key, value in numbers(config):
        _require(not isinstance(value, float) or math.isfinite(value), f"{key} must be a finite number, got {value}")
    p, m, o = config.pipeline, config.model, config.output
    require_in(config.seed, 0, MAX_SEED, "seed")
    require_in(p.n_chunk_frames, 1, MAX_CHUNK_FRAMES, "pipeline.n_chunk_frames")
    require_in(p.seam_frames, 0, MAX_CHUNK_FRAMES, "pipeline.seam_frames")
    require_in(p.anchor_frames, 0, MAX_CHUNK_FRAMES, "pipeline.anchor_frames")
    require_in(p.sampling_steps, 1, MAX_SAMPLING_STEPS, "pipeline.sampling_steps")
    _require(0 < p.audio_block_s <= MAX_AUDIO_BLOCK_S, f"pipeline.audio_block_s must be in (0, {MAX_AUDIO_BLOCK_S:g}] (seconds)")
    require_in(m.fps, 1, MAX_FPS, "model.fps")
    require_in(m.sample_rate, 1, MAX_SAMPLE_RATE, "model.sample_rate")
    require_in(m.image_size, 2, MAX_IMAGE_SIZE, "model.image_size")
    require_in(o.realtime_buffer_s, 0, MAX_BUFFER_S, "output.realtime_buffer_s", " (seconds)")
    require_in(o.realtime_target_s, 0, MAX_BUFFER_S, "output.realtime_target_s", " (seconds; 0 = never drop)")
    if p.audio_lookahead_frames is not None:
        require_in(p.audio_lookahead_frames, 0, MAX_CHUNK_FRAMES, "pipeline.audio_lookahead_frames", " (null = the whole context)")
    _require(0 < o.publish_timeout_s <= MAX_BUFFER_S, f"output.publish_timeout_s must be in (0, {MAX_BUFFER_S:g}] (seconds)")
    require_in(o.hls_window, 0, 1_000_000, "output.hls_window", " (0 = keep every segment)")
    _require(0 < config.runtime.dist_timeout_s <= MAX_DIST_TIMEOUT_S,
             f"runtime.dist_timeout_s must be in (0, {MAX_DIST_TIMEOUT_S:g}] (seconds)")  # fmt: skip
    b, s = config.batch, config.storage
    require_in(b.max_retries, 0, 1000, "batch.max_retries")
    require_in(b.ray.workers, 0, 1_000_000, "batch.ray.workers", " (0 = as many as the cluster fits)")
    require_in(b.ray.num_cpus, 0, MAX_THREADS, "batch.ray.num_cpus")
    if b.ray.num_gpus is not None:
        require_in(b.ray.num_gpus, 0, 64, "batch.ray.num_gpus", " (null: 1 where the cluster has GPUs)")
    _require(b.ray.num_cpus > 0 or b.ray.num_gpus != 0, "batch.ray.num_cpus and batch.ray.num_gpus are both 0: give "
             "each worker a CPU or a GPU, or Ray places them all on one node")  # fmt: skip
    require_in(s.lease_s, 5, MAX_BUFFER_S, "storage.lease_s", " (seconds)")


def validate_config(config: Config, family: FamilyConfig) -> None:
    """Raise ConfigError naming the first inconsistent key: the shared keys here, ``family``'s own by its checks."""
    _check_numbers(config)
    p, m, o = config.pipeline, config.model, config.output
    _require(p.n_chunk_frames >= 1, "pipeline.n_chunk_frames must be >= 1")
    _require(p.seam_frames >= 0 and p.anchor_frames >= 0, "pipeline.seam_frames and pipeline.anchor_frames must be >= 0")
    _require(p.sampling_steps >= 1, "pipeline.sampling_steps must be >= 1")
    _require(p.sampling_shift > 0, "pipeline.sampling_shift must be > 0")
    _require(p.audio_block_s > 0, "pipeline.audio_block_s must be > 0")
    idle_motion_settings(config)  # ConfigError naming the pipeline.idle_motion key out of range

    _require(m.fps >= 1, "model.fps must be >= 1")
    _require(m.sample_rate >= 1 and m.sample_rate % m.fps == 0,
             f"model.sample_rate ({m.sample_rate}) must be a positive multiple of model.fps ({m.fps})")  # fmt: skip
    _require(m.image_size >= 2 and m.image_size % 2 == 0, "model.image_size must be even and >= 2 (H.264 yuv420p)")
    _require(0 <= o.crf <= 51, "output.crf must be in [0, 51]")
    _require(MIN_MAX_SIDE <= o.max_side <= MAX_MAX_SIDE, f"output.max_side must be in [{MIN_MAX_SIDE}, {MAX_MAX_SIDE}] (pixels of the long side)")
    _require(o.preset in X264_PRESETS, f"output.preset '{o.preset}' is not an x264 preset; valid choices: {', '.join(X264_PRESETS)}")
    _require(0 < o.gop_seconds <= MAX_GOP_SECONDS, f"output.gop_seconds must be in (0, {MAX_GOP_SECONDS:g}] (seconds between keyframes)")
    _require(o.publish_timeout_s > 0, "output.publish_timeout_s must be > 0 (seconds)")
    _require(o.hls_window >= 0, "output.hls_window must be >= 0 (0 = keep every segment)")
    _require(o.realtime_buffer_s >= 0, "output.realtime_buffer_s must be >= 0 (seconds)")
    _require(0 <= config.runtime.threads <= MAX_THREADS, f"runtime.threads must be in [0, {MAX_THREADS}] (0 = torch's default)")
    _require(config.runtime.dist_timeout_s > 0, "runtime.dist_timeout_s must be > 0 (seconds)")
    sequence, guidance = config.runtime.sequence_parallel, config.runtime.guidance_parallel
    _require(sequence == "auto" or (isinstance(sequence, int) and not isinstance(sequence, bool) and sequence >= 1),
             f"runtime.sequence_parallel must be auto or a number of ranks >= 1 (1 = off), got {sequence!r}")  # fmt: skip
    _require(isinstance(guidance, bool) or guidance == "auto",
             f"runtime.guidance_parallel must be true, false or auto, got {guidance!r}")  # fmt: skip
    stages = config.runtime.pipeline_parallel
    _require(stages == "auto" or (isinstance(stages, int) and not isinstance(stages, bool) and stages >= 1),
             f"runtime.pipeline_parallel must be auto or a number of stages >= 1 (1 = off), got {stages!r}")
    _require(not (config.runtime.overlap and config.runtime.offload != Offload.none),
             "runtime.overlap=true needs runtime.offload=none (two threads would move models in and out at once); "
             "set runtime.overlap=null")  # fmt: skip
    _require(config.runtime.offload_resident_blocks >= 1, "runtime.offload_resident_blocks must be >= 1 (blocks on the device at once)")
    require_in(config.runtime.offload_resident_blocks, 1, MAX_RESIDENT_BLOCKS, "runtime.offload_resident_blocks")
    _require(not (config.runtime.overlap and not family.overlap),
             f"runtime.overlap=true: the {family.name} family's models cannot emit on a second thread (model="
             f"{m.name}); set runtime.overlap=null")  # fmt: skip
    family.validate(config)


def idle_motion_settings(config: Config) -> IdleMotionSettings:
    """``pipeline.idle_motion`` as the settings the idle motion runs with (ConfigError naming a key out of range)."""
    return IdleMotionSettings(**dataclasses.asdict(config.pipeline.idle_motion))
