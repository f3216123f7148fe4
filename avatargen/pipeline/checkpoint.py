"""A resume point: everything a render needs to continue after the last frame it emitted, small and constant in size.

Taken right after an N chunk body left the pipeline (see ``CheckpointGrid``): the rolling state then holds only the
tail of that N chunk, plus the VAE decoder's causal cache. The reference conditioning is recomputed from the inputs,
noise is a pure function of (seed, chunk kind, index) and the audio is re-read from the file, so none of them is
stored. ``steps`` says where in the chunk schedule to continue: the schedule is a pure function of the audio, so a
resumed render replays it and skips the first ``steps`` steps without running them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from avatargen.models.vae import DecoderCache
from avatargen.pipeline.state import LatentWindow, RollingState


@dataclass
class RenderCheckpoint:
    """The state of a render after ``frames`` frames and ``steps`` schedule steps."""

    frames: int
    steps: int
    n_chunks: int
    i_chunks: int
    state: RollingState
    decoder_cache: DecoderCache | None

    def to_tensors(self) -> tuple[dict[str, Tensor], dict[str, Any]]:
        """(tensors for safetensors, JSON-able metadata): the two files of a checkpoint."""
        tensors: dict[str, Tensor] = {}
        windows = {}
        for index, window in self.state.n_windows.items():
            tensors[f"n_window.{index}"] = window.latents.contiguous()
            windows[str(index)] = window.start
        if self.state.i_window is not None:
            tensors["i_window"] = self.state.i_window.latents.contiguous()
        if self.state.shown is not None:
            tensors["shown"] = self.state.shown.latents.contiguous()
        cache_len = 0
        if self.decoder_cache is not None:
            for k, frames in enumerate(self.decoder_cache.frames):
                tensors[f"decoder_cache.{k}"] = frames.contiguous()
            cache_len = len(self.decoder_cache.frames)
        meta = {
            "frames": self.frames, "steps": self.steps, "n_chunks": self.n_chunks, "i_chunks": self.i_chunks,
            "n_windows": windows, "i_start": self.state.i_window.start if self.state.i_window is not None else None,
            "i_index": self.state.i_index, "decoder_cache": cache_len,
            "shown_start": self.state.shown.start if self.state.shown is not None else None,
        }  # fmt: skip
        return tensors, meta

    @classmethod
    def from_tensors(cls, tensors: dict[str, Tensor], meta: dict[str, Any]) -> "RenderCheckpoint":
        state = RollingState(
            n_windows={int(k): LatentWindow(int(start), tensors[f"n_window.{k}"]) for k, start in meta["n_windows"].items()},
            i_window=LatentWindow(int(meta["i_start"]), tensors["i_window"]) if meta["i_start"] is not None else None,
            i_index=int(meta["i_index"]),
            shown=LatentWindow(int(meta["shown_start"]), tensors["shown"]) if meta.get("shown_start") is not None else None,
        )
        count = int(meta["decoder_cache"])
        cache = DecoderCache(frames=[tensors[f"decoder_cache.{k}"] for k in range(count)]) if count else None
        return cls(int(meta["frames"]), int(meta["steps"]), int(meta["n_chunks"]), int(meta["i_chunks"]), state, cache)

    def to(self, device: torch.device) -> "RenderCheckpoint":
        """The same resume point with every tensor on ``device``: a checkpoint is read on the CPU, and the rolling
        state and the decoder cache are concatenated with activations on the pipeline's device."""
        state = RollingState(
            n_windows={k: LatentWindow(w.start, w.latents.to(device)) for k, w in self.state.n_windows.items()},
            i_window=LatentWindow(self.state.i_window.start, self.state.i_window.latents.to(device))
            if self.state.i_window is not None else None,
            i_index=self.state.i_index,
            shown=LatentWindow(self.state.shown.start, self.state.shown.latents.to(device)) if self.state.shown is not None else None,
        )  # fmt: skip
        cache = DecoderCache(frames=[f.to(device) for f in self.decoder_cache.frames]) if self.decoder_cache else None
        return RenderCheckpoint(self.frames, self.steps, self.n_chunks, self.i_chunks, state, cache)

    def tensors(self) -> list[Tensor]:
        """Every tensor of the resume point (the rolling state's windows and the decoder cache)."""
        return list(self.to_tensors()[0].values())
