"""Causal video VAE: per-frame 2D encoder, streaming decoder with causal temporal convs at the latent resolution.

Spatial factor ``2 ** len(widths)`` (8 by default), no temporal compression: one latent frame per video frame.

Streaming (after Wan2.1's causal VAE, reorganised): only the :class:`CausalConv3d` layers look across time, and
each owns its state explicitly: ``forward(x, cache) -> (y, new_cache)`` where the cache is its last ``k - 1`` input
frames. :meth:`VAE.decode` threads a :class:`DecoderCache` (one tensor per causal conv) in and out, so decoding a
video chunk by chunk equals decoding it at once, with memory bounded by the chunk, not the video.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn
from avatargen.families.tiny.params import VAEParams


@dataclass
class DecoderCache:
    """Streaming-decode state: one tensor per :class:`CausalConv3d`, each its last ``k - 1`` input frames."""

    frames: list[Tensor]


class CausalConv3d(nn.Module):
    """3D conv with kernel (k, 3, 3) padded only on the past side in time (and 'same' in space).

    The past padding is the previous call's last ``k - 1`` input frames (zeros on the first call), passed in and
    returned explicitly so the layer itself holds no state.

    The weights are a ``Conv3d``'s (checkpoint keys ``conv.weight``, ``conv.bias``), but the forward runs them as
    ``k`` 2D convolutions over time-shifted frames, summed: the same result up to float rounding, and 3-4x faster on
    a CPU, where ``Conv3d`` falls back to a slow im2col kernel (docs/performance.md, "Decoder").
    """

    def __init__(self, in_channels: int, out_channels: int, temporal_kernel: int) -> None:
        super().__init__()
        if temporal_kernel < 1:
            raise ValueError(f"temporal_kernel must be >= 1, got {temporal_kernel}")
        self.past = temporal_kernel - 1
        self.conv = nn.Conv3d(in_channels, out_channels, (temporal_kernel, 3, 3), padding=(0, 1, 1))

    def forward(self, x: Tensor, cache: Tensor | None) -> tuple[Tensor, Tensor]:
        """``x``: (B, Cin, T, h, w), ``cache``: (B, Cin, k-1, h, w) or None -> (y (B, Cout, T, h, w), new cache)."""
        if cache is None:
            b, c, _, h, w = x.shape
            cache = x.new_zeros(b, c, self.past, h, w)  # (B, Cin, k-1, h, w)
        x = torch.cat([cache, x], dim=2)  # (B, Cin, k-1+T, h, w)
        # clone: a slice would keep the whole concatenated chunk alive through the cache.
        new_cache = x[:, :, x.shape[2] - self.past :].clone()  # (B, Cin, k-1, h, w)
        return self._temporal_conv(x), new_cache  # (B, Cout, T, h, w)

    def _temporal_conv(self, x: Tensor) -> Tensor:
        """(B, Cin, k-1+T, h, w) -> (B, Cout, T, h, w): the Conv3d with no time padding, as k summed 2D convs."""
        b, _, padded, h, w = x.shape
        frames = padded - self.past
        weight, bias = self.conv.weight, self.conv.bias  # (Cout, Cin, k, 3, 3), (Cout,)
        per_frame = rearrange(x, "b c t h w -> b t c h w")  # (B, k-1+T, Cin, h, w)
        out = None
        for tap in range(self.past + 1):
            shifted = per_frame[:, tap : tap + frames].reshape(b * frames, -1, h, w)  # (B*T, Cin, h, w)
            shifted = shifted.contiguous(memory_format=torch.channels_last)
            term = F.conv2d(shifted, weight[:, :, tap], bias if tap == 0 else None, padding=1)  # (B*T, Cout, h, w)
            out = term if out is None else out + term
        return rearrange(out, "(b t) c h w -> b c t h w", b=b)  # (B, Cout, T, h, w)


class ResBlock2d(nn.Module):
    """``x + conv(SiLU(conv(SiLU(x))))``, 3x3 convs. No normalisation: it costs more than the convs on CPU."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        """(N, C, H, W) -> (N, C, H, W)."""
        return x + self.conv2(F.silu(self.conv1(F.silu(x))))


class Encoder(nn.Module):
    """Per-frame 2D encoder: image (N, 3, H, W) -> posterior (mean, logvar), each (N, C, H/f, W/f)."""

    def __init__(self, params: VAEParams) -> None:
        super().__init__()
        widths = params.widths
        self.conv_in = nn.Conv2d(3, widths[-1], 3, padding=1)
        stages: list[nn.Module] = []
        for i in reversed(range(len(widths))):  # full resolution -> latent resolution
            # No residual blocks at full resolution: they would cost a quarter of the encoder for little gain.
            blocks = params.blocks_per_level if i < len(widths) - 1 else 0
            stages += [ResBlock2d(widths[i]) for _ in range(blocks)]
            stages.append(nn.Conv2d(widths[i], widths[max(i - 1, 0)], 3, stride=2, padding=1))
        self.down = nn.Sequential(*stages)
        self.mid = ResBlock2d(widths[0])
        self.conv_out = nn.Conv2d(widths[0], 2 * params.latent_channels, 3, padding=1)

    def forward(self, images: Tensor) -> tuple[Tensor, Tensor]:
        """(N, 3, H, W) -> (mean, logvar), each (N, C, H/f, W/f)."""
        x = self.mid(self.down(self.conv_in(images)))  # (N, w0, H/f, W/f)
        mean, logvar = self.conv_out(F.silu(x)).chunk(2, dim=1)  # (N, C, H/f, W/f) each
        return mean, logvar.clamp(-30.0, 20.0)


class Decoder(nn.Module):
    """Latents (B, C, T, h, w) -> video (B, 3, T, fh, fw) in [-1, 1].

    Two causal convs at the latent resolution carry the temporal context; everything above it runs per frame
    (T folded into the batch) as residual 3x3 blocks and PixelShuffle x2 upsamplers, the last of which emits RGB.
    """

    def __init__(self, params: VAEParams) -> None:
        super().__init__()
        widths, k = params.decoder_levels, params.temporal_kernel
        self.causal_in = CausalConv3d(params.latent_channels, widths[0], k)
        self.causal_mid = CausalConv3d(widths[0], widths[0], k)
        levels: list[nn.Module] = []
        for i, width in enumerate(widths):
            out = widths[i + 1] if i + 1 < len(widths) else 3
            levels += [ResBlock2d(width) for _ in range(params.blocks_per_level)]
            levels += [nn.Conv2d(width, 4 * out, 3, padding=1), nn.PixelShuffle(2)]
            if i + 1 < len(widths):
                levels.append(nn.SiLU())
        self.up = nn.Sequential(*levels)

    def forward(self, z: Tensor, cache: DecoderCache | None, read: Window | None = None) -> tuple[Tensor, DecoderCache]:
        """``z``: (B, C, T, h, w) -> (video (B, 3, T, fh, fw), new cache).

        ``read`` (y0, y1, x0, x1), output pixels of ``z``'s grid (end exclusive): only those are wanted. The levels
        above the latent resolution then compute only the part of their grid those pixels depend on, and the video
        is those pixels alone, (B, 3, T, y1 - y0, x1 - x0), equal to the whole output's there up to float rounding
        (a conv's output at ``k // 2`` or more pixels inside a crop's edge does not see the edge)."""
        past = cache.frames if cache is not None else [None, None]
        b, t = z.shape[0], z.shape[2]
        x, cache_in = self.causal_in(z, past[0])  # (B, w0, T, h, w)
        dx, cache_mid = self.causal_mid(F.silu(x), past[1])  # (B, w0, T, h, w)
        x = x + dx  # (B, w0, T, h, w)
        x = rearrange(x, "b c t h w -> (b t) c h w").contiguous(memory_format=torch.channels_last)  # (BT, w0, h, w)
        if read is None:
            x = self.up(x)  # (BT, 3, fh, fw)
        else:
            x = self._up_within(x, read)  # (BT, 3, y1 - y0, x1 - x0)
        video = rearrange(torch.tanh(x), "(b t) c h w -> b c t h w", b=b, t=t)  # (B, 3, T, ., .)
        return video, DecoderCache(frames=[cache_in, cache_mid])

    def _up_within(self, x: Tensor, read: Window) -> Tensor:
        """``self.up`` over (N, w0, h, w), each level after the first cropped to the window ``read`` needs of it:
        -> (N, 3, y1 - y0, x1 - x0)."""
        needed = _needed_windows(list(self.up), read)  # each module's input window, at its own scale
        top, left = 0, 0  # where x's first row and column lie on its level's grid
        for index, module in enumerate(self.up):
            if index == 0 or isinstance(self.up[index - 1], nn.PixelShuffle):  # a new level
                x, top, left = _crop(x, needed[index], top, left)
            x = module(x)
            if isinstance(module, nn.PixelShuffle):
                top, left = top * module.upscale_factor, left * module.upscale_factor
        x, _, _ = _crop(x, read, top, left)
        return x


Window = tuple[int, int, int, int]  # (y0, y1, x0, x1) on a level's pixel grid, end exclusive


def _reach(module: nn.Module) -> int:
    """How many pixels beyond an output pixel ``module``'s output depends on (its stacked 'same' convs' half widths)."""
    if isinstance(module, nn.Conv2d):
        return int(module.padding[0])
    return sum(_reach(child) for child in module.children())


def _needed_windows(modules: list[nn.Module], read: Window) -> list[Window]:
    """For a stack of per-pixel ops, 'same' convs and PixelShuffles: each module's input window that the output
    window ``read`` depends on, at that module's own scale."""
    y0, y1, x0, x1 = read
    needed: list[Window] = [read] * len(modules)
    for index in reversed(range(len(modules))):
        module = modules[index]
        if isinstance(module, nn.PixelShuffle):
            r = module.upscale_factor
            y0, y1, x0, x1 = y0 // r, -(-y1 // r), x0 // r, -(-x1 // r)
        else:
            k = _reach(module)
            y0, y1, x0, x1 = y0 - k, y1 + k, x0 - k, x1 + k
        needed[index] = (y0, y1, x0, x1)
    return needed


def _crop(x: Tensor, window: Window, top: int, left: int) -> tuple[Tensor, int, int]:
    """(N, C, H, W) whose first pixel is at (``top``, ``left``) of its grid -> its part inside ``window`` (clipped to
    what it holds), and where that part's first pixel lies."""
    y0, y1, x0, x1 = window
    rows = max(y0 - top, 0), min(y1 - top, x.shape[-2])
    cols = max(x0 - left, 0), min(x1 - left, x.shape[-1])
    return x[..., rows[0] : rows[1], cols[0] : cols[1]], top + rows[0], left + cols[0]


class VAE(nn.Module):
    """Causal video VAE with a per-frame encoder and a chunk-streaming decoder (see the module docstring)."""

    def __init__(self, params: VAEParams) -> None:
        super().__init__()
        if not params.widths:
            raise ValueError("VAEParams.widths must not be empty")
        if len(params.decoder_levels) != len(params.widths):
            raise ValueError(f"VAEParams.decoder_widths needs as many levels as widths ({len(params.widths)}): the "
                             "spatial factor is 2 ** levels")  # fmt: skip
        self.params = params
        self.factor = 2 ** len(params.widths)
        self.encoder = Encoder(params)
        self.decoder = Decoder(params)
        # NHWC weights for the per-frame 2D convs (the fast conv path on CPU); Conv3d weights stay as they are.
        self.encoder.to(memory_format=torch.channels_last)
        self.decoder.up.to(memory_format=torch.channels_last)
        # Per-channel statistics of the posterior means, measured after training, so that the latents the DiTs see
        # are roughly unit-variance (identity until set). Saved in the checkpoint with the weights.
        self.register_buffer("latent_mean", torch.zeros(params.latent_channels))
        self.register_buffer("latent_std", torch.ones(params.latent_channels))

    def init_weights(self) -> None:
        """Identity latent statistics (each layer's default init does the rest; also after a meta-device build)."""
        nn.init.zeros_(self.latent_mean)
        nn.init.ones_(self.latent_std)

    def _check_size(self, images: Tensor) -> None:
        if images.shape[-1] % self.factor or images.shape[-2] % self.factor:
            raise ValueError(f"image size {tuple(images.shape[-2:])} is not a multiple of {self.factor}")

    def encode_distribution(self, images: Tensor) -> tuple[Tensor, Tensor]:
        """Images (B, 3, H, W) in [-1, 1] -> posterior (mean, logvar), each (B, C, H/f, W/f)."""
        self._check_size(images)
        return self.encoder(images.contiguous(memory_format=torch.channels_last))

    def encode(self, images: Tensor) -> Tensor:
        """Images (B, 3, H, W) in [-1, 1] -> normalised posterior mean (B, C, H/f, W/f)."""
        mean = self.encode_distribution(images)[0]  # (B, C, h, w)
        return (mean - self.latent_mean.view(1, -1, 1, 1)) / self.latent_std.view(1, -1, 1, 1)

    def still_cache(self, latents: Tensor) -> DecoderCache:
        """The decoder state of a video that was still at ``latents``' first frame before it started.

        Normalised latents (B, C, T, h, w) -> a cache for :meth:`decode`. Starting from this rather than from zeros
        (a past the decoder never sees in training) keeps the first frames as clean as the rest.
        """
        first = latents[:, :, :1] * self.latent_std.view(1, -1, 1, 1, 1) + self.latent_mean.view(1, -1, 1, 1, 1)
        past = first.expand(-1, -1, self.decoder.causal_in.past, -1, -1)  # (B, C, k-1, h, w)
        x, cache_in = self.decoder.causal_in(past, None)  # (B, w0, k-1, h, w)
        _, cache_mid = self.decoder.causal_mid(F.silu(x), None)
        return DecoderCache(frames=[cache_in, cache_mid])

    def decode(self, latents: Tensor, cache: DecoderCache | None = None, read: Window | None = None) -> tuple[Tensor, DecoderCache]:
        """Latents (B, C, T, h, w) -> (video (B, 3, T, fh, fw) in [-1, 1], cache for the next chunk).

        ``latents`` are normalised like :meth:`encode`'s output. Pass the returned cache with the next chunk of the
        same video; ``None`` starts a new video. ``read`` (y0, y1, x0, x1): only those output pixels are computed
        above the latent resolution and returned (:meth:`Decoder.forward`).
        """
        raw = latents * self.latent_std.view(1, -1, 1, 1, 1) + self.latent_mean.view(1, -1, 1, 1, 1)
        return self.decoder(raw, cache, read)
