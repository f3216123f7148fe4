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
        """Latents (1, C, T, h, w) of the window after ``steps`` Euler steps; at given frames they equal ``given``."""
        with self.dit.active() as dit:

            def velocity(x_t: Tensor, t: Tensor) -> Tensor:
                return dit(x_t, t, given, given_mask, reference.ref_low, audio, reference.text)

            latents = euler_sample(velocity, noise, steps, self.shift)  # (1, C, T, h, w)
        mask = given_mask[:, None, :, None, None]  # (1, 1, T, 1, 1)
        return torch.where(mask, given, latents)
