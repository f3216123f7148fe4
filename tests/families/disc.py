"""A toy model family, defined here and nowhere else: a disc whose radius follows the audio's loudness, drawn over
the reference's mean colour. It plugs into the one chunk engine like the real families (its N chunks, I chunks,
hand-over, frames), so ``avatargen render model=disc`` runs with resume, overlap and live outputs. A render finds it
through the ``avatargen.families`` entry point group (see ``tests/pipeline/test_third_family.py``)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch

from avatargen.config.families import FamilyConfig
from avatargen.config.schema import ModelConfig, WeightsSource
from avatargen.pipeline.family import ChunkRun, FamilyEngine
from avatargen.pipeline.schedule import ChunkSchedule
from avatargen.pipeline.state import LatentWindow
from avatargen.runtime.offload import OffloadMonitor
from avatargen.runtime.precision import Precision


@dataclass
class DiscConfig(ModelConfig):
    name: str = "disc"
    family: str = "disc"
    weights: WeightsSource = WeightsSource.random  # nothing to load
    image_size: int = 64
    chunk_seconds: float = 0.0  # how long each chunk "computes" (to stop a render in the middle)


@dataclass
class DiscModels:
    monitor: OffloadMonitor
    precision: Precision


class DiscChunks:
    def __init__(self, config: Any, models: DiscModels, composited: bool | None = None):
        self.config = config
        self.schedule = ChunkSchedule(8, 0, config.pipeline.interpolates(True), seam_frames=4, anchor_frames=1)
        self.device = torch.device("cpu")
        self.audio_context_frames = 0
        self.audio_history_frames = self.schedule.tail_frames

    def start(self, reference_rgb: np.ndarray, prompt: str, stats: Any, read_box: Any, inputs: Any = None) -> "DiscRun":
        return DiscRun(self.config, reference_rgb.reshape(-1, 3).mean(axis=0), self.schedule.tail_frames)


class DiscRun(ChunkRun):
    def __init__(self, config: Any, colour: np.ndarray, tail_frames: int):
        self.config, self.colour, self.tail_frames = config, colour, tail_frames

    def _radii(self, audio: Any, start: int, end: int) -> torch.Tensor:
        time.sleep(self.config.model.chunk_seconds)
        samples = audio.samples(start, end).reshape(end - start, -1)  # (T, samples per frame)
        loudness = np.sqrt((samples**2).mean(axis=1)) * 4  # RMS: 0.25 is a full disc
        return torch.from_numpy(np.clip(loudness, 0, 1)).float().view(1, 1, -1, 1, 1)  # (1, 1, T, 1, 1)

    def n_chunk(self, step: Any, audio: Any, state: Any) -> None:
        state.n_windows[step.index] = LatentWindow(step.start, self._radii(audio, step.start, step.end))
        state.n_windows.pop(step.index - 2, None)

    def i_chunk(self, step: Any, audio: Any, state: Any) -> None:
        left = state.n_windows[step.index].frames(step.left_start, step.seam_start)[:, :, -1:]
        right = state.n_windows[step.index + 1].frames(step.seam_end, step.right_end)[:, :, :1]
        weights = torch.linspace(0, 1, step.seam_end - step.seam_start + 2)[1:-1].view(1, 1, -1, 1, 1)
        state.i_window, state.i_index = LatentWindow(step.seam_start, left + (right - left) * weights), step.index
        del state.n_windows[step.index]

    def hand_over(self, step: Any, state: Any) -> torch.Tensor:
        window = state.window(step.source, step.index)
        if step.source == "I":
            state.i_window = None
        else:
            state.n_windows[step.index] = window.keep_last(self.tail_frames)
        return window.frames(step.start, step.end)

    def frames(self, segment: torch.Tensor, step: Any) -> Iterator[np.ndarray]:
        size = self.config.model.image_size
        y, x = np.mgrid[:size, :size] - (size - 1) / 2
        frames = np.empty((segment.shape[2], size, size, 3), dtype=np.uint8)
        for k, radius in enumerate(segment.flatten().tolist()):
            frames[k] = self.colour.astype(np.uint8)
            frames[k][np.hypot(y, x) <= radius * size / 2] = 255
        yield frames


FAMILY = FamilyConfig(name="disc", model_config=DiscConfig, engine="tests.families.disc:ENGINE", overlap=True,
                      config_dir=Path(__file__).parent / "conf")
ENGINE = FamilyEngine(family=FAMILY, model_parts=lambda config: [],  # no weights: nothing to place
                      precision=lambda config, device, parallel: Precision(torch.float32, "disc"),
                      model_set=lambda config, modules, monitor, precision, parallel: DiscModels(monitor, precision),
                      chunk_steps=DiscChunks, weight_files=lambda config: [])
