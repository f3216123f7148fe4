"""Checks across keys that a per-key type check cannot see (run once, before any work starts)."""

from __future__ import annotations

import dataclasses

from avatargen.compose.idle_motion import IdleMotionSettings
from avatargen.config.families import family_of
from avatargen.config.schema import Config, Offload
from avatargen.errors import ConfigError

MAX_THREADS = 1024  # far past any machine's cores; torch segfaults creating ~100,000 threads
MAX_GOP_SECONDS = 60.0  # x264 rejects keyframe intervals near 2^31 frames; a minute is already a lot to lose on a kill
MIN_MAX_SIDE, MAX_MAX_SIDE = 64, 4096  # a face needs pixels; x264's level limits and memory end past 4K

X264_PRESETS = ("ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower", "veryslow")


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


def validate_config(config: Config) -> None:
    """Raise ConfigError naming the first inconsistent key: the shared keys here, the family's own by its checks."""
    p, m, o = config.pipeline, config.model, config.output
    family = family_of(config)
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
    _require(not (config.runtime.overlap and config.runtime.offload != Offload.none),
             "runtime.overlap=true needs runtime.offload=none (two threads would move models in and out at once); "
             "set runtime.overlap=null")  # fmt: skip
    _require(config.runtime.offload_resident_blocks >= 1, "runtime.offload_resident_blocks must be >= 1 (blocks on the device at once)")
    _require(not (config.runtime.overlap and not family.overlap),
             f"runtime.overlap=true: the {family.name} family's models cannot emit on a second thread (model="
             f"{m.name}); set runtime.overlap=null")  # fmt: skip
    family.validate(config)


def idle_motion_settings(config: Config) -> IdleMotionSettings:
    """``pipeline.idle_motion`` as the settings the idle motion runs with (ConfigError naming a key out of range)."""
    return IdleMotionSettings(**dataclasses.asdict(config.pipeline.idle_motion))
