"""Wan clip sampling as InfiniteTalk runs it: shifted flow-matching timesteps, classifier-free guidance over text and
audio, Euler updates, the given latents (the motion frames; a seam's anchors on both sides) pinned at every step.

Timesteps: ``linspace(1000, 1, steps)`` then 0, each shifted ``t' = 1000 s u / (1 + (s - 1) u)`` with ``u = t / 1000``.
Guidance (three DiT passes per step; two when ``text_scale == 1``)::

    v = uncond + text_scale (cond - no_text) + audio_scale (no_text - uncond)

``cond``: prompt and audio; ``no_text``: negative prompt and audio; ``uncond``: negative prompt and all-zero audio
windows (fed through the audio projection, as the reference does). Update: ``x <- x - v (t_i - t_i+1) / 1000``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
from torch import Tensor

from avatargen.families.wan.models.conditioning import i2v_input
from avatargen.modules import Module
from avatargen.runtime.guidance import GuidanceSplit
from avatargen.families.wan.stages.context import WanReference

TRAIN_TIMESTEPS = 1000


def shifted_timesteps(steps: int, shift: float) -> list[float]:
    """``steps + 1`` timesteps from 1000 down to 0 (the last one is 0, unshifted)."""
    u = torch.linspace(TRAIN_TIMESTEPS, 1, steps, dtype=torch.float64) / TRAIN_TIMESTEPS
    shifted = TRAIN_TIMESTEPS * shift * u / (1 + (shift - 1) * u)
    return [float(t) for t in shifted] + [0.0]


@dataclass(frozen=True)
class Guidance:
    """Classifier-free guidance scales over text and audio (InfiniteTalk: 5 and 4; 1 and 2 with distill LoRAs)."""

    text_scale: float = 5.0
    audio_scale: float = 4.0


def guidance_passes(guidance: Guidance) -> int:
    """DiT passes per step: three, or two when the text scale is 1 (its two text terms cancel)."""
    return 2 if guidance.text_scale == 1.0 else 3


class WanSamplerStage:
    """Generates the latents of one clip whose first latent frames (the motion frames) are given, or of one seam
    window whose first and last latent frames (its anchors) are given. ``split`` says which of a step's guidance
    passes run on this rank (all of them on one process; avatargen/runtime/guidance.py)."""

    def __init__(self, dit: Module, steps: int, shift: float, guidance: Guidance, split: GuidanceSplit | None = None):
        self.dit = dit
        self.steps = steps
        self.shift = shift
        self.guidance = guidance
        self.split = split if split is not None else GuidanceSplit()

    @torch.inference_mode()
    def sample(self, reference: WanReference, audio: Tensor, motion: Tensor, noise: Tensor,
               end: Tensor | None = None, condition: Tensor | None = None, clip_tokens: Tensor | None = None,
               person_masks: Tensor | None = None) -> Tensor:  # fmt: skip
        """Latents (1, z, T, h, w) of the clip; its first ``motion.shape[2]`` latent frames equal ``motion`` (and its
        last ``end.shape[2]`` equal ``end`` when given).

        ``audio`` (1, F, 5, layers, C) per video frame, or (1, 2, F, ...) for two speakers with ``person_masks``
        (3, h, w); ``noise`` (1, z, T, h, w); ``condition`` (1, 4 + z, T, h, w) the I2V mask and given latents and
        ``clip_tokens`` (1, Li, D) the CLIP tokens (default: the reference's, the first frame given).
        """
        g = self.guidance
        pinned = motion.shape[2]
        tail = 0 if end is None else end.shape[2]
        condition = reference.condition if condition is None else condition
        clip_tokens = reference.clip_tokens if clip_tokens is None else clip_tokens
        # the reference's unconditional audio is one speaker's zeros, whatever the speakers (no routing then)
        silence = torch.zeros_like(audio if audio.dim() == 5 else audio[:, 0])
        x = noise.clone()

        def pin(x: Tensor) -> None:
            x[:, :, :pinned] = motion
            if end is not None:
                x[:, :, x.shape[2] - tail :] = end

        pin(x)
        times = shifted_timesteps(self.steps, self.shift)
        with self.dit.active() as dit:

            def run(text: Tensor, sound: Tensor, t: Tensor) -> Tensor:
                inputs = i2v_input(x, condition[:, :4], condition[:, 4:])  # (1, 36, T, h, w)
                return dit(inputs, t, text, clip_tokens, sound, person_masks)  # (1, z, T, h, w) fp32

            # the passes of a step, in this order: (text, audio) of cond, then no_audio, or no_text and uncond
            if guidance_passes(g) == 2:
                inputs = [(reference.text, audio), (reference.text, silence)]
            else:
                inputs = [(reference.text, audio), (reference.negative, audio), (reference.negative, silence)]
            for t_now, t_next in zip(times[:-1], times[1:]):
                t = torch.full((1,), t_now, device=x.device)
                outputs = self.split.run([partial(run, text, sound, t) for text, sound in inputs])
                if len(outputs) == 2:
                    cond, no_audio = outputs
                    v = no_audio + g.audio_scale * (cond - no_audio)
                else:
                    cond, no_text, uncond = outputs
                    v = uncond + g.text_scale * (cond - no_text) + g.audio_scale * (no_text - uncond)
                x = x - v * ((t_now - t_next) / TRAIN_TIMESTEPS)  # (1, z, T, h, w)
                pin(x)
        return x
