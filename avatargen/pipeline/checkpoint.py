"""A resume point: everything a render needs to continue after the last frame it emitted, small and constant in size.

Taken right after an N chunk body left the pipeline (see ``CheckpointGrid``): the rolling state then holds only what
later steps read of that N chunk. It has two parts, each written by the code that owns it: the engine's (frames,
schedule steps, chunk counts, the rolling state's windows) and the family's (its output-side state, e.g. the VAE
decoder's causal cache: ``ChunkRun.save``), stored under the ``family.`` prefix. The reference conditioning is
recomputed from the inputs, noise is a pure function of (seed, chunk kind, index) and the audio is re-read from the
file, so none of them is stored. ``steps`` says where in the chunk schedule to continue: the schedule is a pure
function of the audio, so a resumed render replays it and skips the first ``steps`` steps without running them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from avatargen.pipeline.state import LatentWindow, RollingState

if TYPE_CHECKING:  # types only: a render that runs no model imports no torch
    import torch
    from torch import Tensor

FAMILY_PREFIX = "family."


@dataclass
class RenderCheckpoint:
    """The state of a render after ``frames`` frames and ``steps`` schedule steps."""

    frames: int
    steps: int
    n_chunks: int
    i_chunks: int
    state: RollingState
    family_state: tuple[dict[str, Tensor], dict[str, Any]] = field(default_factory=lambda: ({}, {}))

    def to_tensors(self) -> tuple[dict[str, Tensor], dict[str, Any]]:
        """(tensors for safetensors, JSON-able metadata): the two files of a checkpoint."""
        tensors: dict[str, Tensor] = {}
        windows = {}
        for index, window in self.state.n_windows.items():
            tensors[f"n_window.{index}"] = window.latents.contiguous()
            windows[str(index)] = window.start
        if self.state.i_window is not None:
            tensors["i_window"] = self.state.i_window.latents.contiguous()
        family_tensors, family_meta = self.family_state
        tensors.update({FAMILY_PREFIX + name: tensor.contiguous() for name, tensor in family_tensors.items()})
        meta = {
            "frames": self.frames, "steps": self.steps, "n_chunks": self.n_chunks, "i_chunks": self.i_chunks,
            "n_windows": windows, "i_start": self.state.i_window.start if self.state.i_window is not None else None,
            "i_index": self.state.i_index, "family": family_meta,
        }  # fmt: skip
        return tensors, meta

    @classmethod
    def from_tensors(cls, tensors: dict[str, Tensor], meta: dict[str, Any]) -> "RenderCheckpoint":
        state = RollingState(
            n_windows={int(k): LatentWindow(int(start), tensors[f"n_window.{k}"]) for k, start in meta["n_windows"].items()},
            i_window=LatentWindow(int(meta["i_start"]), tensors["i_window"]) if meta["i_start"] is not None else None,
            i_index=int(meta["i_index"]),
        )
        family = {name[len(FAMILY_PREFIX) :]: t for name, t in tensors.items() if name.startswith(FAMILY_PREFIX)}
        return cls(int(meta["frames"]), int(meta["steps"]), int(meta["n_chunks"]), int(meta["i_chunks"]), state,
                   (family, dict(meta["family"])))  # fmt: skip

    def to(self, device: torch.device) -> "RenderCheckpoint":
        """The same resume point with every tensor on ``device``: a checkpoint is read on the CPU, and its tensors are
        concatenated with activations on the pipeline's device."""
        state = RollingState(
            n_windows={k: LatentWindow(w.start, w.latents.to(device)) for k, w in self.state.n_windows.items()},
            i_window=LatentWindow(self.state.i_window.start, self.state.i_window.latents.to(device))
            if self.state.i_window is not None else None,
            i_index=self.state.i_index,
        )  # fmt: skip
        family_tensors, family_meta = self.family_state
        family = ({name: t.to(device) for name, t in family_tensors.items()}, family_meta)
        return RenderCheckpoint(self.frames, self.steps, self.n_chunks, self.i_chunks, state, family)

    def tensors(self) -> list[Tensor]:
        """Every tensor of the resume point (the rolling state's windows and the family's state)."""
        return list(self.to_tensors()[0].values())
