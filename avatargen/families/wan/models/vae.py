"""The Wan2.1 causal video VAE (``Wan2.1_VAE.pth``): stride 4 x 8 x 8, 16 latent channels, streaming encode and decode.

Tensor names are the reference's (Wan-Video/Wan2.1 ``wan/modules/vae.py``), so the checkpoint loads strictly.
What differs is how the causal past is kept: the reference threads one mutable list through every layer with a
running index and clears it on each call, so a video can only be decoded in one call. Here every module that looks
back in time takes its past as an argument and returns the new one, ``forward(x, past) -> (y, past)``, where
``past`` is a tree of tensors mirroring the module tree (``None`` = the stream has not started). Decoding a video
chunk by chunk with the returned past carried along gives the frames of a whole-clip decode, and memory is bounded
by the chunk.

Time, as in the reference: the first frame of a stream is coded alone and every later latent frame codes four
video frames, so ``1 + 4 k`` video frames <-> ``1 + k`` latent frames. The temporal down/up-samplers pass the first
frame straight through; every causal 3x3x3 conv sees two frames of past (zeros before the stream starts).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from avatargen.families.wan.models.params import WanVAEParams

Past = Tensor | tuple["Past", ...] | None  # a module's causal state: a tensor, its children's states, or None


class CausalConv3d(nn.Conv3d):
    """Conv3d padded only on the past side in time: its past is the previous input frames (``past_frames`` of them).

    ``padding`` is given like the reference's (p_t, p_h, p_w): space is zero-padded by (p_h, p_w) on both sides,
    time by ``2 * p_t`` frames of past, taken from ``past`` (zeros when ``past`` is None).
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0) -> None:
        pad = (padding,) * 3 if isinstance(padding, int) else tuple(padding)
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, padding=(0, pad[1], pad[2]))
        self.past_frames = 2 * pad[0]

    def forward(self, x: Tensor, past: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """``x`` (B, C, T, H, W), ``past`` (B, C, past_frames, H, W) or None -> (y (B, C', T', H', W'), new past)."""
        if self.past_frames == 0:
            return super().forward(x), None
        if past is None:
            past = x.new_zeros(*x.shape[:2], self.past_frames, *x.shape[3:])  # (B, C, P, H, W)
        x = torch.cat([past, x], dim=2)  # (B, C, P + T, H, W)
        # clone: a view would keep the whole chunk alive through the carried past.
        return super().forward(x), x[:, :, -self.past_frames :].clone()


class RMSNorm(nn.Module):
    """Channel RMS norm (``gamma``): ``normalize(x, dim=1) * sqrt(C) * gamma``, for 5D video or 4D image tensors."""

    def __init__(self, dim: int, images: bool) -> None:
        super().__init__()
        self.scale = dim**0.5
        self.gamma = nn.Parameter(torch.ones(dim, 1, 1) if images else torch.ones(dim, 1, 1, 1))

    def reset_parameters(self) -> None:
        """Unit scale (the meta-device build's random init calls this; see ``models/structure.py``)."""
        nn.init.ones_(self.gamma)

    def forward(self, x: Tensor) -> Tensor:
        """(B, C, [T,] H, W) -> same shape."""
        return F.normalize(x, dim=1) * self.scale * self.gamma


def per_frame(module: nn.Module, x: Tensor) -> Tensor:
    """Apply a 2D module to every frame: (B, C, T, H, W) -> (B, C', T, H', W')."""
    t = x.shape[2]
    y = module(rearrange(x, "b c t h w -> (b t) c h w"))  # (B*T, C', H', W')
    return rearrange(y, "(b t) c h w -> b c t h w", t=t)


class ResidualBlock(nn.Module):
    """``shortcut(x) + conv(SiLU(norm(conv(SiLU(norm(x))))))`` with causal 3x3x3 convs (``residual.{0,2,3,6}``)."""

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.residual = nn.Sequential(
            RMSNorm(in_dim, images=False), nn.SiLU(), CausalConv3d(in_dim, out_dim, 3, padding=1),
            RMSNorm(out_dim, images=False), nn.SiLU(), nn.Dropout(0.0), CausalConv3d(out_dim, out_dim, 3, padding=1),
        )  # fmt: skip
        self.shortcut = CausalConv3d(in_dim, out_dim, 1) if in_dim != out_dim else nn.Identity()

    def forward(self, x: Tensor, past: Past) -> tuple[Tensor, Past]:
        """(B, in, T, H, W) -> (B, out, T, H, W); ``past`` = (conv1's, conv2's)."""
        past1, past2 = past if past is not None else (None, None)
        norm1, _, conv1, norm2, _, _, conv2 = self.residual
        h, past1 = conv1(F.silu(norm1(x)), past1)  # (B, out, T, H, W)
        h, past2 = conv2(F.silu(norm2(h)), past2)
        skip = self.shortcut(x)[0] if isinstance(self.shortcut, CausalConv3d) else x
        return skip + h, (past1, past2)


class AttentionBlock(nn.Module):
    """Single-head spatial self-attention within each frame (``norm``, ``to_qkv``, ``proj``); no causal state."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = RMSNorm(dim, images=True)
        self.to_qkv = nn.Conv2d(dim, 3 * dim, 1)
        self.proj = nn.Conv2d(dim, dim, 1)

    def forward(self, x: Tensor, past: Past = None) -> tuple[Tensor, Past]:
        """(B, C, T, H, W) -> (B, C, T, H, W)."""
        b, c, t, h, w = x.shape
        frames = rearrange(x, "b c t h w -> (b t) c h w")  # (BT, C, H, W)
        qkv = self.to_qkv(self.norm(frames)).flatten(2).transpose(1, 2)  # (BT, HW, 3C)
        q, k, v = qkv[:, None].chunk(3, dim=-1)  # (BT, 1, HW, C) each
        out = F.scaled_dot_product_attention(q, k, v)[:, 0].transpose(1, 2).reshape(b * t, c, h, w)  # (BT, C, H, W)
        return x + rearrange(self.proj(out), "(b t) c h w -> b c t h w", t=t), None


class Resample(nn.Module):
    """x2 spatial down/up-sampling, optionally x2 in time (``resample.1``, ``time_conv``).

    In time the first frame of the stream passes straight through; ``downsample3d`` then merges frames (2i, 2i+1,
    2i+2) of the stream with a stride-2 conv (past: the last frame seen), ``upsample3d`` turns each later frame into
    two with a causal conv whose output channels are the two frames (past: its last two input frames).
    """

    def __init__(self, dim: int, mode: str) -> None:
        super().__init__()
        self.mode = mode
        if mode.startswith("upsample"):
            self.resample = nn.Sequential(
                nn.Upsample(scale_factor=(2.0, 2.0), mode="nearest-exact"), nn.Conv2d(dim, dim // 2, 3, padding=1)
            )
        elif mode.startswith("downsample"):
            self.resample = nn.Sequential(nn.ZeroPad2d((0, 1, 0, 1)), nn.Conv2d(dim, dim, 3, stride=(2, 2)))
        else:
            raise ValueError(f"unknown resample mode {mode!r}")
        if mode == "upsample3d":
            self.time_conv = CausalConv3d(dim, 2 * dim, (3, 1, 1), padding=(1, 0, 0))
        elif mode == "downsample3d":
            self.time_conv = CausalConv3d(dim, dim, (3, 1, 1), stride=(2, 1, 1), padding=(0, 0, 0))

    def forward(self, x: Tensor, past: Past) -> tuple[Tensor, Past]:
        """(B, C, T, H, W) -> (B, C', T', H', W'); ``past`` is None at the start of a stream."""
        if self.mode == "upsample3d":
            x, past = self._double_frames(x, past)  # (B, C, T', H, W)
        x = per_frame(self.resample, x)  # (B, C', T', H', W')
        if self.mode == "downsample3d":
            x, past = self._halve_frames(x, past)
        return x, past

    def _double_frames(self, x: Tensor, past: Tensor | None) -> tuple[Tensor, Tensor]:
        head = x[:, :, :0]
        if past is None:  # the stream's first frame is not doubled, and the time conv's stream starts after it
            head, x = x[:, :, :1], x[:, :, 1:]
            past = x.new_zeros(*x.shape[:2], self.time_conv.past_frames, *x.shape[3:])
        if x.shape[2] == 0:
            return head, past
        y, past = self.time_conv(x, past)  # (B, 2C, T, H, W)
        y = rearrange(y, "b (two c) t h w -> b c (t two) h w", two=2)  # (B, C, 2T, H, W): frame 2i, then 2i+1
        return torch.cat([head, y], dim=2), past

    def _halve_frames(self, x: Tensor, past: Tensor | None) -> tuple[Tensor, Tensor]:
        head = x[:, :, :0]
        stream = x if past is None else torch.cat([past, x], dim=2)  # (B, C, P + T, H, W)
        if past is None:
            head = x[:, :, :1]  # the stream's first frame passes straight through
        if (stream.shape[2] - 1) % 2:
            raise ValueError("a chunk broke the temporal downsampling's stride; encode 1 + 4k frames, then 4k")
        y = self.time_conv(stream)[0] if stream.shape[2] >= 3 else stream[:, :, :0]  # (B, C, (P+T-1)/2, H, W)
        return torch.cat([head, y], dim=2), stream[:, :, -1:].clone()


class StatefulSequential(nn.Sequential):
    """``nn.Sequential`` of ``forward(x, past) -> (y, past)`` modules; its past is the tuple of theirs."""

    def forward(self, x: Tensor, past: Past) -> tuple[Tensor, Past]:  # type: ignore[override]
        new_past = []
        for i, layer in enumerate(self):
            x, layer_past = layer(x, None if past is None else past[i])
            new_past.append(layer_past)
        return x, tuple(new_past)


def _middle(dim: int) -> StatefulSequential:
    return StatefulSequential(ResidualBlock(dim, dim), AttentionBlock(dim), ResidualBlock(dim, dim))


def _head(dim: int, out_channels: int) -> nn.Sequential:
    return nn.Sequential(RMSNorm(dim, images=False), nn.SiLU(), CausalConv3d(dim, out_channels, 3, padding=1))


def _run_head(head: nn.Sequential, x: Tensor, past: Past) -> tuple[Tensor, Past]:
    norm, _, conv = head
    return conv(F.silu(norm(x)), past)


class Encoder3d(nn.Module):
    """Video (B, 3, 1 + 4k, H, W) -> posterior moments (B, 2 z_dim, 1 + k, H/8, W/8)."""

    def __init__(self, params: WanVAEParams) -> None:
        super().__init__()
        dims = [params.base_dim * m for m in (1, *params.dim_mult)]
        self.conv1 = CausalConv3d(3, dims[0], 3, padding=1)
        layers: list[nn.Module] = []
        for i, (in_dim, out_dim) in enumerate(zip(dims[:-1], dims[1:])):
            for _ in range(params.num_res_blocks):
                layers.append(ResidualBlock(in_dim, out_dim))
                in_dim = out_dim
            if i != len(params.dim_mult) - 1:
                layers.append(Resample(out_dim, "downsample3d" if params.temporal_downsample[i] else "downsample2d"))
        self.downsamples = StatefulSequential(*layers)
        self.middle = _middle(dims[-1])
        self.head = _head(dims[-1], 2 * params.z_dim)

    def forward(self, x: Tensor, past: Past) -> tuple[Tensor, Past]:
        """``past`` = (conv1, downsamples, middle, head)."""
        p = past if past is not None else (None,) * 4
        x, p0 = self.conv1(x, p[0])
        x, p1 = self.downsamples(x, p[1])
        x, p2 = self.middle(x, p[2])
        x, p3 = _run_head(self.head, x, p[3])
        return x, (p0, p1, p2, p3)


class Decoder3d(nn.Module):
    """Latents (B, z_dim, 1 + k, h, w) -> video (B, 3, 1 + 4k, 8h, 8w) (first latent frame of a stream: 1 frame)."""

    def __init__(self, params: WanVAEParams) -> None:
        super().__init__()
        mult = params.dim_mult
        dims = [params.base_dim * m for m in (mult[-1], *mult[::-1])]
        temporal_upsample = params.temporal_downsample[::-1]
        self.conv1 = CausalConv3d(params.z_dim, dims[0], 3, padding=1)
        self.middle = _middle(dims[0])
        layers: list[nn.Module] = []
        for i, (in_dim, out_dim) in enumerate(zip(dims[:-1], dims[1:])):
            if i > 0:
                in_dim //= 2  # the upsampler before halves the channels
            for _ in range(params.num_res_blocks + 1):
                layers.append(ResidualBlock(in_dim, out_dim))
                in_dim = out_dim
            if i != len(mult) - 1:
                layers.append(Resample(out_dim, "upsample3d" if temporal_upsample[i] else "upsample2d"))
        self.upsamples = StatefulSequential(*layers)
        self.head = _head(dims[-1], 3)

    def forward(self, x: Tensor, past: Past) -> tuple[Tensor, Past]:
        """``past`` = (conv1, middle, upsamples, head)."""
        p = past if past is not None else (None,) * 4
        x, p0 = self.conv1(x, p[0])
        x, p1 = self.middle(x, p[1])
        x, p2 = self.upsamples(x, p[2])
        x, p3 = _run_head(self.head, x, p[3])
        return x, (p0, p1, p2, p3)


@dataclass(frozen=True)
class VAEStream:
    """The causal past of one video being encoded or decoded: pass it back with the video's next chunk."""

    past: Past
    frames_seen: int  # latent frames (decode) or video frames (encode) consumed so far


class WanVAE(nn.Module):
    """Wan2.1 video VAE with streaming :meth:`encode` and :meth:`decode` (see the module docstring)."""

    def __init__(self, params: WanVAEParams) -> None:
        super().__init__()
        params.validate()
        self.params = params
        self.encoder = Encoder3d(params)
        self.conv1 = CausalConv3d(2 * params.z_dim, 2 * params.z_dim, 1)
        self.conv2 = CausalConv3d(params.z_dim, params.z_dim, 1)
        self.decoder = Decoder3d(params)

    def block_stacks(self) -> list[nn.ModuleList]:
        """No repeated block stack: the VAE is placed as one piece."""
        return []

    def _stats(self, like: Tensor) -> tuple[Tensor, Tensor]:
        mean = torch.tensor(self.params.latent_mean, dtype=like.dtype, device=like.device).view(1, -1, 1, 1, 1)
        std = torch.tensor(self.params.latent_std, dtype=like.dtype, device=like.device).view(1, -1, 1, 1, 1)
        return mean, std

    def encode(
        self, video: Tensor, stream: VAEStream | None = None, frames_per_step: int | None = 4
    ) -> tuple[Tensor, VAEStream]:
        """Video (B, 3, T, H, W) in [-1, 1] -> (normalised posterior mean (B, z_dim, T', H/8, W/8), stream).

        A new stream takes ``1 + 4k`` frames (-> ``1 + k`` latent frames), a continued one ``4k``. The encoder runs
        the first frame alone, then ``frames_per_step`` frames at a time (a multiple of 4; the reference's 4 holds
        four frames of activations), or everything in one pass with None; all give the same latents.
        """
        t_stride, s_stride = self.params.temporal_stride, self.params.spatial_stride
        first = 1 if stream is None else 0
        frames = video.shape[2]
        if frames == 0 or (frames - first) % t_stride:
            need = f"1 + {t_stride}k" if stream is None else f"{t_stride}k"
            kind = "new" if stream is None else "continued"
            raise ValueError(f"encode got {frames} frames; a {kind} stream takes {need}")
        if video.shape[-1] % s_stride or video.shape[-2] % s_stride:
            raise ValueError(f"frame size {tuple(video.shape[-2:])} is not a multiple of {s_stride}")
        if frames_per_step is not None and (frames_per_step % t_stride or frames_per_step < t_stride):
            raise ValueError(f"frames_per_step must be a positive multiple of {t_stride}, got {frames_per_step}")
        past = None if stream is None else stream.past
        if frames_per_step is None:
            bounds = [0, frames]
        else:
            bounds = [0, first] if first else [0]
            bounds += list(range(first + frames_per_step, frames, frames_per_step)) + [frames]
        moments = []
        for start, stop in zip(bounds[:-1], bounds[1:]):
            if stop > start:
                out, past = self.encoder(video[:, :, start:stop], past)  # (B, 2 z, t, h, w)
                moments.append(out)
        mu = self.conv1(torch.cat(moments, dim=2))[0][:, : self.params.z_dim]  # (B, z, T', h, w)
        mean, std = self._stats(mu)
        seen = (0 if stream is None else stream.frames_seen) + frames
        return (mu - mean) / std, VAEStream(past=past, frames_seen=seen)

    def decode(
        self, latents: Tensor, stream: VAEStream | None = None, frames_per_step: int | None = 1
    ) -> tuple[Tensor, VAEStream]:
        """Normalised latents (B, z_dim, T, h, w) -> (video (B, 3, T', 8h, 8w) in [-1, 1], stream).

        ``T' = 1 + 4 (T - 1)`` for a new stream, ``4 T`` for a continued one. The decoder runs ``frames_per_step``
        latent frames at a time (1, like the reference, holds four frames of activations), or all in one pass with
        None; any value gives the same frames.
        """
        if latents.shape[2] < 1:
            raise ValueError("decode needs at least one latent frame")
        frames_per_step = latents.shape[2] if frames_per_step is None else frames_per_step
        if frames_per_step < 1:
            raise ValueError(f"frames_per_step must be >= 1, got {frames_per_step}")
        mean, std = self._stats(latents)
        z = self.conv2(latents * std + mean)[0]  # (B, z, T, h, w)
        past = None if stream is None else stream.past
        frames = []
        for start in range(0, z.shape[2], frames_per_step):
            out, past = self.decoder(z[:, :, start : start + frames_per_step], past)  # (B, 3, t', H, W)
            frames.append(out)
        seen = (0 if stream is None else stream.frames_seen) + z.shape[2]
        return torch.cat(frames, dim=2).clamp(-1.0, 1.0), VAEStream(past=past, frames_seen=seen)
