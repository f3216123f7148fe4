"""The A2V (flow matching, with the text encoder, then distilled to one step) and SR (one-step) training phases over
the latent cache."""

from __future__ import annotations

import random
from typing import Callable

import torch
from torch import Tensor

from avatargen.families.tiny.models.a2v_dit import A2VDiT
from avatargen.families.tiny.models.sr_dit import SRDiT
from avatargen.families.tiny.models.text_encoder import TextEncoder, tokenize
from avatargen.sampling import euler_sample, noisy_sample
from avatargen.families.tiny.train.config import RecipeConfig
from avatargen.families.tiny.train.optim import optimizer_step, warmup_cosine
from avatargen.families.tiny.train.latent_cache import HIGH_EVERY, EncodedClip, mouth_weight


def sample_window_mask(rng: random.Random, length: int, motion: int, anchors: int) -> Tensor:
    """Which frames of a training window are given, mixing the three ways the pipeline calls the A2V:
    the first N chunk (nothing given), later N chunks (motion frames first), I chunks (anchors at both ends)."""
    mask = torch.zeros(length, dtype=torch.bool)
    kind = rng.random()
    if kind < 0.2:
        return mask
    if kind < 0.6:
        mask[:motion] = True
    else:
        mask[:anchors] = True
        mask[length - anchors :] = True
    return mask


def a2v_batch(cache: list[EncodedClip], rng: random.Random, batch: int, window: int, motion: int, anchors: int):
    x0, audio, ref, mask, weights, prompts = [], [], [], [], [], []
    for _ in range(batch):
        clip = cache[rng.randrange(len(cache))]
        start = rng.randrange(0, clip.low.shape[0] - window + 1)
        x0.append(clip.low[start : start + window].transpose(0, 1))  # (C, L, h, w)
        audio.append(clip.audio[start : start + window])  # (L, D)
        ref.append(clip.ref_low)
        mask.append(sample_window_mask(rng, window, motion, anchors))
        size = clip.low.shape[-1]
        weights.append(mouth_weight(clip.mouth_low[start : start + window], size, 1.0).transpose(0, 1))  # (1, L, h, w)
        prompts.append(clip.prompt)
    return torch.stack(x0), torch.stack(audio), torch.stack(ref), torch.stack(mask), torch.stack(weights), prompts


def generated_frames_mse(prediction: Tensor, target: Tensor, weights: Tensor, given: Tensor) -> Tensor:
    """Weighted MSE of (B, C, L, h, w) latents over the generated frames only: ``given`` (B, L) frames do not count;
    ``weights`` (B, 1, L, h, w)."""
    generated = (~given)[:, None, :, None, None].float()  # (B, 1, L, 1, 1)
    error = (prediction - target).pow(2) * weights * generated
    return error.sum() / (weights * generated).expand_as(error).sum().clamp(min=1.0)


def train_a2v(
    model: A2VDiT, text_encoder: TextEncoder, cache: list[EncodedClip], cfg: RecipeConfig, motion: int, anchors: int,
    max_tokens: int, log: Callable[[str, dict], None],
) -> None:
    """Flow matching: x_t = (1 - t) x0 + t noise, target v = noise - x0, loss on generated frames only, with the
    mouth's latent cells weighted up (that is where lip sync lives, and it is a small part of the frame)."""
    rng = random.Random(cfg.seed + 3)
    params = list(model.parameters()) + list(text_encoder.parameters())
    optimizer = torch.optim.AdamW(params, lr=cfg.a2v_lr, weight_decay=0.01)
    schedule = warmup_cosine(optimizer, cfg.a2v_steps)
    model.train(), text_encoder.train()
    running = 0.0
    for step in range(1, cfg.a2v_steps + 1):
        x0, audio, ref, mask, weights, prompts = a2v_batch(cache, rng, cfg.a2v_batch, cfg.a2v_window, motion, anchors)
        weights = 1.0 + (cfg.a2v_mouth_weight * (weights - 1.0))  # (B, 1, L, h, w)
        t = torch.sigmoid(torch.randn(x0.shape[0]))  # logit-normal times, as in SD3
        noise = torch.randn_like(x0)
        x_t = noisy_sample(x0, noise, t)
        _, text = text_encoder(tokenize(prompts, max_tokens))  # (B, D_text)
        velocity = model(x_t, t, x0, mask, ref, audio, text)  # (B, C, L, h, w)
        loss = generated_frames_mse(velocity, noise - x0, weights, mask)
        optimizer_step(optimizer, schedule, loss, params)
        running += loss.item()
        if step % cfg.log_every == 0 or step == cfg.a2v_steps:
            log("a2v", {"step": step, "loss": running / cfg.log_every, "lr": schedule.get_last_lr()[0]})
            running = 0.0
    model.eval(), text_encoder.eval()


def distill_a2v(
    student: A2VDiT, teacher: A2VDiT, text_encoder: TextEncoder, cache: list[EncodedClip], cfg: RecipeConfig,
    motion: int, anchors: int, windows: tuple[int, int], max_tokens: int, log: Callable[[str, dict], None],
) -> None:
    """One-step distillation: ``student`` (a copy of the trained A2V) learns to take the noise, in one Euler step from
    t = 1, to what the teacher's ``cfg.a2v_teacher_steps``-step sampler makes of the same noise and conditioning.

    Windows alternate between ``windows`` (the pipeline's two sizes: an N chunk with its motion frames, an I chunk);
    the loss is the A2V phase's, on generated frames with the mouth weighted up. The text encoder stays as trained."""
    rng = random.Random(cfg.seed + 7)
    noise_rng = torch.Generator().manual_seed(cfg.seed + 7)
    optimizer = torch.optim.AdamW(student.parameters(), lr=cfg.a2v_distill_lr, weight_decay=0.01)
    schedule = warmup_cosine(optimizer, cfg.a2v_distill_steps)
    teacher.eval(), text_encoder.eval(), student.train()
    running = 0.0
    for step in range(1, cfg.a2v_distill_steps + 1):
        window = windows[step % 2]
        x0, audio, ref, mask, weights, prompts = a2v_batch(cache, rng, cfg.a2v_batch, window, motion, anchors)
        weights = 1.0 + (cfg.a2v_mouth_weight * (weights - 1.0))  # (B, 1, L, h, w)
        noise = torch.randn(x0.shape, generator=noise_rng)  # (B, C, L, h, w)
        start = torch.ones(x0.shape[0])  # t = 1: pure noise
        with torch.no_grad():
            _, text = text_encoder(tokenize(prompts, max_tokens))  # (B, D_text)
            target = euler_sample(lambda x, t: teacher(x, t, x0, mask, ref, audio, text), noise, cfg.a2v_teacher_steps)
        one_step = noise - student(noise, start, x0, mask, ref, audio, text)  # (B, C, L, h, w)
        loss = generated_frames_mse(one_step, target, weights, mask)
        optimizer_step(optimizer, schedule, loss, student.parameters())
        running += loss.item()
        if step % cfg.log_every == 0 or step == cfg.a2v_distill_steps:
            log("a2v_distill", {"step": step, "loss": running / cfg.log_every, "lr": schedule.get_last_lr()[0]})
            running = 0.0
    student.eval()


def sr_batch(cache: list[EncodedClip], rng: random.Random, batch: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    low, high, ref, boxes = [], [], [], []
    for _ in range(batch):
        clip = cache[rng.randrange(len(cache))]
        j = rng.randrange(clip.high.shape[0])
        i = j * HIGH_EVERY
        low.append(clip.low[i]), high.append(clip.high[j]), ref.append(clip.ref_high), boxes.append(clip.mouth_low[i])
    return torch.stack(low), torch.stack(high), torch.stack(ref), torch.stack(boxes)


def train_sr(model: SRDiT, cache: list[EncodedClip], cfg: RecipeConfig, log: Callable[[str, dict], None]) -> None:
    """One-step regression from (noised) low-res latents to high-res latents, mouth weighted up."""
    rng = random.Random(cfg.seed + 5)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.sr_lr, weight_decay=0.01)
    schedule = warmup_cosine(optimizer, cfg.sr_steps)
    model.train()
    running = 0.0
    for step in range(1, cfg.sr_steps + 1):
        low, high, ref, boxes = sr_batch(cache, rng, cfg.sr_batch)
        low = low + cfg.sr_input_noise * torch.randn_like(low)
        weights = mouth_weight(boxes, high.shape[-1], cfg.sr_mouth_weight, scale=2)  # (B, 1, H, W)
        loss = (weights * (model(low, ref) - high).abs()).mean()
        optimizer_step(optimizer, schedule, loss, model.parameters())
        running += loss.item()
        if step % cfg.log_every == 0 or step == cfg.sr_steps:
            log("sr", {"step": step, "loss": running / cfg.log_every, "lr": schedule.get_last_lr()[0]})
            running = 0.0
    model.eval()
