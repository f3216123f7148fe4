"""One render request, end to end: validate inputs, build the models, run the pipeline into an MP4, report.

The CLI parses arguments and prints; everything a render does lives here, so scripts can call ``render()`` too.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from omegaconf import DictConfig

from avatargen.config.loader import to_config, to_yaml
from avatargen.config.schema import WeightsSource
from avatargen.errors import BadInputError, RenderInterrupted
from avatargen.io.audio import AudioFileSource
from avatargen.io.image import load_reference_image
from avatargen.io.mp4_writer import Mp4Writer
from avatargen.pipeline.build import build_modules, resolve_checkpoint, resolve_device
from avatargen.pipeline.pipeline import Pipeline, Progress
from avatargen.runtime.distributed import require_single_process, world_info


@dataclass
class RenderRequest:
    """What the user asked for."""

    image: Path
    audio: Path
    output: Path
    prompt: str = ""


def config_path_for(output: Path) -> Path:
    """Where the resolved config of a render is saved: beside the video, ``OUT.yaml``."""
    return output.with_suffix(".yaml")


def _check_output(output: Path) -> None:
    if output.suffix.lower() != ".mp4":
        raise BadInputError(f"output '{output}' must end in .mp4 (the container written is MP4)")
    if output.exists() and output.is_dir():
        raise BadInputError(f"output '{output}' is a folder; give a file name ending in .mp4")


def _write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def peak_rss_mb() -> float:
    """Peak resident memory of this process (not ffmpeg's), in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def render(
    request: RenderRequest,
    cfg: DictConfig,
    progress_factory: Callable[[int, int | None], Any] | None = None,
    warn: Callable[[str], None] = lambda message: print(message, file=sys.stderr),
    record_seams: bool = False,
) -> dict[str, Any]:
    """Render ``request`` with config ``cfg``; returns the report printed by ``--json``.

    ``progress_factory(fps, total_frames_estimate)`` returns a context manager with ``update(Progress)``.
    """
    started = time.perf_counter()
    require_single_process(world_info())
    config = to_config(cfg)
    _check_output(request.output)
    reference = load_reference_image(request.image, config.model.image_size, config.pipeline.image_fit.value)
    block = max(1, int(config.pipeline.audio_block_s * config.model.sample_rate))
    source = AudioFileSource(request.audio, config.model.sample_rate, block_samples=block)
    if config.model.weights == WeightsSource.random:
        weights = "random"
        warn("note: model.weights=random: untrained weights, the video is noise (for tests and benchmarks only)")
    else:
        weights = str(resolve_checkpoint(config))
    if config.runtime.threads:
        torch.set_num_threads(config.runtime.threads)
    device = resolve_device(config)
    models = build_modules(config, device)
    pipeline = Pipeline(config, models)

    size = config.model.image_size
    estimate = round(source.duration_hint * config.model.fps) if source.duration_hint else None
    writer = Mp4Writer(
        request.output, size, size, config.model.fps, request.audio,
        crf=config.output.crf, preset=config.output.preset, gop_seconds=config.output.gop_seconds,
    )
    progress_cm = progress_factory(config.model.fps, estimate) if progress_factory else None
    try:
        if progress_cm is not None:
            with progress_cm as bar:
                stats = pipeline.render(reference, source, [writer], request.prompt, on_progress=bar.update, record_seams=record_seams)
        else:
            stats = pipeline.render(reference, source, [writer], request.prompt, record_seams=record_seams)
    except KeyboardInterrupt:
        partial = writer.abort()
        raise RenderInterrupted(f"interrupted; the frames rendered so far are in '{partial}'") from None
    except BaseException:
        writer.abort()
        raise
    finally:
        source.close()
    encode_started = time.perf_counter()
    writer.close()
    if config.output.save_config:
        _write_text_atomic(config_path_for(request.output), to_yaml(cfg))
    wall = time.perf_counter() - started
    duration = stats.frames / config.model.fps
    stage_s = dict(stats.stage_s)
    stage_s["encode_finish"] = time.perf_counter() - encode_started
    ttff = (writer.first_frame_time - started) if writer.first_frame_time else None
    return {
        "output": str(request.output),
        "weights": weights,
        "frames": stats.frames,
        "fps": config.model.fps,
        "duration_s": round(duration, 4),
        "chunks": stats.n_chunks,
        "i_chunks": stats.i_chunks,
        "ttff_s": round(ttff, 4) if ttff is not None else None,
        "wall_s": round(wall, 4),
        "gen_fps": round(stats.frames / wall, 3) if wall > 0 else None,
        "rtf": round(wall / duration, 4) if duration > 0 else None,
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "device": str(device),
        "stage_s": {k: round(v, 4) for k, v in stage_s.items()},
        "seams": stats.seams,
    }
