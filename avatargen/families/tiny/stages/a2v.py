"""A2V: multi-step flow-matching sampling of low-resolution latents for one chunk window."""

from __future__ import annotations

import torch
from torch import Tensor

from avatargen.modules import Module
from avatargen.sampling import euler_sample
from avatargen.families.tiny.stages.context import ReferenceContext


class A2VStage:
    """Generates the latents of a window whose given frames (motion frames or anchors) are held fixed."""

    def __init__(self, dit: Module, shift: float):
        self.dit = dit
        self.shift = shift

    @torch.inference_mode()
    def generate(
        self,
        reference: ReferenceContext,
        audio: Tensor,  # (1, T, D_audio)
        given: Tensor,  # (1, C, T, h, w) clean latents, meaningful where given_mask is True
        given_mask: Tensor,  # (1, T) bool
        noise: Tensor,  # (1, C, T, h, w)
        steps: int,
    ) -> Tensor:
        """Latents (1, C, T, h, w) of the window after ``steps`` Euler steps; at given frames they equal ``given``.
        Only the frames not given are predicted (the given ones' velocity is never read)."""
        wanted = generated_frames(given_mask)
        with self.dit.active() as dit:

            def velocity(x_t: Tensor, t: Tensor) -> Tensor:
                return dit(x_t, t, given, given_mask, reference.ref_low, audio, reference.text, frames_out=wanted)

            latents = euler_sample(velocity, noise, steps, self.shift)  # (1, C, T, h, w)
        mask = given_mask[:, None, :, None, None]  # (1, 1, T, 1, 1)
        return torch.where(mask, given, latents)


def generated_frames(given_mask: Tensor) -> tuple[int, int] | None:
    """(f0, f1) when the frames no sample of the batch is given, ``given_mask`` (B, T) False, are f0..f1-1 and all
    the others are given in every sample; else None (every frame is predicted)."""
    generated = ~given_mask.all(dim=0)  # (T,)
    if bool((given_mask.any(dim=0) & generated).any()):
        return None
    indices = generated.nonzero().flatten()
    if len(indices) == 0 or int(indices[-1] - indices[0]) + 1 != len(indices):
        return None
    return int(indices[0]), int(indices[-1]) + 1
