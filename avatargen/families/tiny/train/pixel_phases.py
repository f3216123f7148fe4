"""The VAE phase (random single frames), its decoder distilled into another width, and the audio-encoder phase
(talking clips -> mouth openness)."""

from __future__ import annotations

import random
from collections import OrderedDict
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from avatargen.data.examples import make_clip
from avatargen.data.identity import identity_from_seed
from avatargen.data.pose import FacePose
from avatargen.data.render import FaceRenderer
from avatargen.families.tiny.models.audio_encoder import AudioEncoder
from avatargen.families.tiny.models.vae import VAE, DecoderCache
from avatargen.families.tiny.train.config import RecipeConfig
from avatargen.families.tiny.train.optim import optimizer_step, warmup_cosine
from avatargen.families.tiny.train.latent_cache import images_to_tensor, mouth_weight


def random_pose(rng: random.Random) -> FacePose:
    """A pose anywhere in the range the motion generator uses, so the VAE sees every expression and head pose."""
    return FacePose(
        dx=rng.uniform(-0.05, 0.05), dy=rng.uniform(-0.04, 0.04), roll=rng.uniform(-0.12, 0.12),
        yaw=rng.uniform(-0.8, 0.8), pitch=rng.uniform(-0.5, 0.5), gaze=rng.uniform(-1, 1),
        mouth_open=rng.random() ** 0.7, mouth_width=rng.uniform(0.7, 1.25), smile=rng.uniform(-0.7, 0.9),
        blink=rng.choice([0.0, 0.0, 0.0, rng.random()]), brow_raise=rng.uniform(-0.8, 0.9),
    )  # fmt: skip


class FrameSampler:
    """Random frames of random training identities (renderers of recent identities are kept, they cache layers)."""

    def __init__(self, size: int, identities: int, seed: int, keep: int = 64):
        self.size = size
        self.identities = identities
        self.rng = random.Random(seed)
        self.renderers: OrderedDict[int, FaceRenderer] = OrderedDict()
        self.keep = keep

    def _renderer(self, seed: int) -> FaceRenderer:
        if seed not in self.renderers:
            self.renderers[seed] = FaceRenderer(identity_from_seed(seed), self.size)
            if len(self.renderers) > self.keep:
                self.renderers.popitem(last=False)
        return self.renderers[seed]

    def batch(self, count: int) -> tuple[Tensor, Tensor]:
        """(images (N, 3, S, S) in [-1, 1], mouth boxes (N, 4) in pixels)."""
        frames, boxes = [], []
        for _ in range(count):
            # Half of each batch from a small rolling pool: cheap renders, and still thousands of identities overall.
            seed = self.rng.randrange(self.identities) if self.rng.random() < 0.5 or not self.renderers else \
                self.rng.choice(list(self.renderers))  # fmt: skip
            frame, box = self._renderer(seed).render(random_pose(self.rng))
            frames.append(frame), boxes.append(np.asarray(box))
        return images_to_tensor(np.stack(frames)), torch.from_numpy(np.stack(boxes)).long()


def decode_with_past(vae: VAE, z: Tensor, sudden: bool) -> Tensor:
    """Decode single frames (N, C, h, w) with a real past in the causal convs' caches, as in streaming inference.

    The past is the frame itself (a still head: what most neighbouring frames look like) or, ``sudden``, another
    sample's latent (a sudden change), so the decoder learns to use its temporal context without depending on it.
    Only the current frame goes through the (expensive) upsampling path.
    """
    decoder = vae.decoder
    others = z.roll(1, dims=0) if sudden else z
    past = torch.stack([others, z], dim=2)[:, :, -decoder.causal_in.past :]  # (N, C, k-1, h, w)
    x_past, cache_in = decoder.causal_in(past, None)  # (N, w0, k-1, h, w)
    _, cache_mid = decoder.causal_mid(F.silu(x_past), None)
    video, _ = decoder(z[:, :, None], DecoderCache(frames=[cache_in, cache_mid]))  # (N, 3, 1, S, S)
    return video[:, :, 0]


def training_view(images: Tensor, weights: Tensor, step: int, rng: random.Random) -> tuple[Tensor, Tensor]:
    """What one VAE step trains on, alternating: on odd steps a random half-size crop at full resolution (the model
    is fully convolutional: 4x cheaper per step; half of the crops are the lower half, which holds the mouth), on
    even steps the whole frame at half resolution (the low-res latents the A2V works in must decode sensibly too).
    ``images`` (N, 3, S, S) and their loss ``weights`` (N, 1, S, S) -> both at the view's size."""
    half = images.shape[-1] // 2
    if step % 2:
        y = rng.randrange(0, half // 8 + 1) * 8 if rng.random() < 0.5 else half
        x = rng.randrange(0, half // 8 + 1) * 8
        return images[..., y : y + half, x : x + half], weights[..., y : y + half, x : x + half]
    return F.interpolate(images, scale_factor=0.5, mode="area"), F.max_pool2d(weights, 2)


def train_vae(vae: VAE, cfg: RecipeConfig, size: int, log: Callable[[str, dict], None]) -> None:
    """L1 reconstruction (mouth weighted up) + a tiny KL on :func:`training_view`'s crops and half-resolution frames.
    Sets the latent statistics at the end."""
    sampler = FrameSampler(size, cfg.train_identities, cfg.seed + 1)
    optimizer = torch.optim.AdamW(vae.parameters(), lr=cfg.vae_lr, weight_decay=0.0)
    schedule = warmup_cosine(optimizer, cfg.vae_steps)
    vae.train()
    running = 0.0
    for step in range(1, cfg.vae_steps + 1):
        images, boxes = sampler.batch(cfg.vae_batch)
        images, weights = training_view(images, mouth_weight(boxes, size, cfg.vae_mouth_weight), step, sampler.rng)
        mean, logvar = vae.encode_distribution(images)
        z = mean + torch.randn_like(mean) * (0.5 * logvar).exp()
        recon = decode_with_past(vae, z, sampler.rng.random() < 0.5)  # (N, 3, S', S')
        l1 = (weights * (recon - images).abs()).mean()
        kl = 0.5 * (mean.pow(2) + logvar.exp() - 1 - logvar).mean()
        loss = l1 + cfg.vae_kl_weight * kl
        optimizer_step(optimizer, schedule, loss, vae.parameters())
        running += l1.item()
        if step % cfg.log_every == 0 or step == cfg.vae_steps:
            log("vae", {"step": step, "l1": running / cfg.log_every, "kl": kl.item(), "lr": schedule.get_last_lr()[0]})
            running = 0.0
    vae.eval()
    with torch.no_grad():
        images, _ = sampler.batch(64)
        means = torch.cat([vae.encode_distribution(images)[0], vae.encode_distribution(F.interpolate(images, scale_factor=0.5, mode="area"))[0].repeat(1, 1, 2, 2)])
        vae.latent_mean.copy_(means.mean(dim=(0, 2, 3)))
        vae.latent_std.copy_(means.std(dim=(0, 2, 3)).clamp(min=1e-3))
    log("vae", {"latent_mean": vae.latent_mean.tolist(), "latent_std": vae.latent_std.tolist()})


def distill_decoder(vae: VAE, teacher: VAE, cfg: RecipeConfig, size: int, log: Callable[[str, dict], None]) -> None:
    """Train ``vae``'s decoder (another width than ``teacher``'s) to decode the teacher's latents: the teacher's
    encoder and latent statistics are copied and stay, so the DiTs' latents mean what they meant. The loss is the
    VAE phase's L1 to the frame plus L1 to the teacher's decode (both mouth-weighted), on the same views."""
    vae.encoder.load_state_dict(teacher.encoder.state_dict())
    vae.latent_mean.copy_(teacher.latent_mean)
    vae.latent_std.copy_(teacher.latent_std)
    teacher.eval().requires_grad_(False)
    sampler = FrameSampler(size, cfg.train_identities, cfg.seed + 5)
    optimizer = torch.optim.AdamW(vae.decoder.parameters(), lr=cfg.decoder_distill_lr, weight_decay=0.0)
    schedule = warmup_cosine(optimizer, cfg.decoder_distill_steps)
    vae.train()
    running = 0.0
    for step in range(1, cfg.decoder_distill_steps + 1):
        images, boxes = sampler.batch(cfg.vae_batch)
        images, weights = training_view(images, mouth_weight(boxes, size, cfg.vae_mouth_weight), step, sampler.rng)
        sudden = sampler.rng.random() < 0.5
        with torch.no_grad():
            mean, logvar = teacher.encode_distribution(images)
            z = mean + torch.randn_like(mean) * (0.5 * logvar).exp()
            target = decode_with_past(teacher, z, sudden)  # (N, 3, S', S')
        recon = decode_with_past(vae, z, sudden)
        l1 = (weights * (recon - images).abs()).mean()
        loss = l1 + (weights * (recon - target).abs()).mean()
        optimizer_step(optimizer, schedule, loss, vae.decoder.parameters())
        running += l1.item()
        if step % cfg.log_every == 0 or step == cfg.decoder_distill_steps:
            log("decoder_distill", {"step": step, "l1": running / cfg.log_every, "to_teacher": loss.item() - l1.item(),
                                    "lr": schedule.get_last_lr()[0]})  # fmt: skip
            running = 0.0
    vae.eval()


def train_audio_encoder(encoder: AudioEncoder, cfg: RecipeConfig, fps: int, sample_rate: int,
                        log: Callable[[str, dict], None]) -> None:
    """Pre-train the audio encoder to predict the ground-truth mouth openness of each frame from the audio around
    it (a linear head, dropped afterwards): its features then carry exactly what lip sync needs."""
    rng = np.random.default_rng(cfg.seed + 2)
    head = nn.Linear(encoder.params.out_dim, 1)
    clips = [make_clip(int(rng.integers(cfg.train_identities)), int(rng.integers(2**31)), 4.0, size=64, fps=fps,
                       sample_rate=sample_rate) for _ in range(48)]  # fmt: skip
    spf = sample_rate // fps
    params = list(encoder.parameters()) + list(head.parameters())
    optimizer = torch.optim.AdamW(params, lr=cfg.audio_lr, weight_decay=0.01)
    schedule = warmup_cosine(optimizer, cfg.audio_steps)
    window = 50  # frames per training window (2 s)
    encoder.train()
    running = 0.0
    pick = random.Random(cfg.seed + 4)
    for step in range(1, cfg.audio_steps + 1):
        waves, targets = [], []
        for _ in range(cfg.audio_batch):
            clip = clips[pick.randrange(len(clips))]
            start = pick.randrange(0, len(clip.openness) - window)
            wave = np.zeros(window * spf, dtype=np.float32)
            piece = clip.audio[start * spf : (start + window) * spf]
            wave[: piece.size] = piece
            gain = 10 ** pick.uniform(-0.5, 0.3)  # loudness should not matter much: users' levels vary
            waves.append(torch.from_numpy(wave * gain)), targets.append(torch.from_numpy(clip.openness[start : start + window]))
        features = encoder(torch.stack(waves))  # (B, window, D)
        loss = F.mse_loss(head(features)[..., 0], torch.stack(targets).float())
        optimizer_step(optimizer, schedule, loss, params, max_norm=None)
        running += loss.item()
        if step % cfg.log_every == 0 or step == cfg.audio_steps:
            log("audio", {"step": step, "mse": running / cfg.log_every, "lr": schedule.get_last_lr()[0]})
            running = 0.0
    encoder.eval()
