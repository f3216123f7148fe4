"""Audio encoder: waveform -> log-mel spectrogram -> one feature vector per video frame.

The receptive field is bounded and known (``context_frames``), so features can be computed window by window with
identical results: the STFT pads the wave itself with a fixed amount of zeros (no ``center=True`` reflection that
would depend on where a window starts), every convolution is local, and no normalisation looks along time.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn
from avatargen.families.tiny.params import AudioEncoderParams


def mel_filterbank(
    n_freqs: int, n_mels: int, sample_rate: int, f_min: float = 0.0, f_max: float | None = None
) -> Tensor:
    """Triangular HTK-mel filters over the ``n_freqs`` rFFT bins: (n_freqs, n_mels), built on the CPU."""
    f_max = sample_rate / 2 if f_max is None else f_max
    mel_lo, mel_hi = (2595.0 * math.log10(1.0 + f / 700.0) for f in (f_min, f_max))
    cpu = torch.device("cpu")  # explicit, so the filters are real even when the model is built on the meta device
    mels = torch.linspace(mel_lo, mel_hi, n_mels + 2, dtype=torch.float64, device=cpu)  # (n_mels + 2,)
    edges = 700.0 * (10.0 ** (mels / 2595.0) - 1.0)  # (n_mels + 2,) Hz
    bin_hz = torch.linspace(0.0, sample_rate / 2, n_freqs, dtype=torch.float64, device=cpu)  # (F,)
    lower, centre, upper = edges[:-2], edges[1:-1], edges[2:]  # (n_mels,) each
    rising = (bin_hz[:, None] - lower) / (centre - lower)  # (F, n_mels)
    falling = (upper - bin_hz[:, None]) / (upper - centre)  # (F, n_mels)
    return torch.clamp(torch.minimum(rising, falling), min=0.0).float()  # (F, n_mels)


class ConvResBlock1d(nn.Module):
    """``x + conv(GELU(conv(LN(x))))`` along time; LayerNorm is over channels only (per time step)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.conv1 = nn.Conv1d(dim, dim, 3, padding=1)
        self.conv2 = nn.Conv1d(dim, dim, 3, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        """(B, D, M) -> (B, D, M)."""
        h = self.norm(x.transpose(1, 2)).transpose(1, 2)  # (B, D, M)
        return x + self.conv2(F.gelu(self.conv1(h)))  # (B, D, M)


class AudioEncoder(nn.Module):
    """Waveform (B, S) at ``sample_rate`` -> per-video-frame features (B, S // samples_per_frame, out_dim).

    Layout: log-mel (``samples_per_frame / hop_length`` mel frames per video frame) -> conv + ``layers`` residual
    conv blocks at the mel rate -> mean-pool to the video frame rate -> one residual conv at frame rate -> LN + linear.
    """

    def __init__(self, params: AudioEncoderParams) -> None:
        super().__init__()
        p = params
        self.params = p
        if p.sample_rate % p.fps:
            raise ValueError(f"sample_rate ({p.sample_rate}) must be a multiple of fps ({p.fps})")
        self.samples_per_frame = p.sample_rate // p.fps
        if self.samples_per_frame % p.hop_length:
            raise ValueError(
                f"samples per video frame (sample_rate // fps = {self.samples_per_frame}) must be a multiple of "
                f"hop_length ({p.hop_length})"
            )
        if p.n_fft < p.hop_length:
            raise ValueError(f"n_fft ({p.n_fft}) must be >= hop_length ({p.hop_length})")
        self.mels_per_frame = self.samples_per_frame // p.hop_length
        # Mel frame j covers samples [j*hop - pad_left, j*hop - pad_left + n_fft): centred on its own hop.
        self.pad_left = (p.n_fft - p.hop_length) // 2
        self.pad_right = p.n_fft - p.hop_length - self.pad_left

        # Not state_dict entries: fixed functions of the params, rebuilt here, on the CPU even under a meta-device
        # build (load_state_dict(assign=True) never touches them); move the module to place them.
        self.register_buffer("window", torch.hann_window(p.n_fft, device="cpu"), persistent=False)
        self.register_buffer(
            "mel_fb", mel_filterbank(p.n_fft // 2 + 1, p.n_mels, p.sample_rate), persistent=False
        )  # (F, n_mels)

        self.conv_in = nn.Conv1d(p.n_mels, p.dim, 3, padding=1)
        self.mel_blocks = nn.ModuleList([ConvResBlock1d(p.dim) for _ in range(p.layers)])
        self.frame_block = ConvResBlock1d(p.dim)
        self.norm_out = nn.LayerNorm(p.dim)
        self.proj_out = nn.Linear(p.dim, p.out_dim)

        # Receptive field: kernel-3 convs at the mel rate widen it by one mel frame each side, those at the frame
        # rate by one video frame each side; the STFT adds max(pad_left, pad_right) samples.
        mel_convs = 1 + 2 * p.layers
        frame_convs = 2
        reach = mel_convs * p.hop_length + max(self.pad_left, self.pad_right)  # samples
        self.context_frames: int = frame_convs + math.ceil(reach / self.samples_per_frame)

    def log_mel(self, wave: Tensor) -> Tensor:
        """(B, S) -> (B, n_mels, S // hop_length) log-mel spectrogram with a fixed (data-independent) scale."""
        padded = F.pad(wave, (self.pad_left, self.pad_right))  # (B, S + n_fft - hop)
        spec = torch.stft(
            padded, self.params.n_fft, self.params.hop_length, window=self.window, center=False, return_complex=True
        )  # (B, F, M)
        power = spec.real**2 + spec.imag**2  # (B, F, M)
        mel = torch.einsum("bfm,fn->bnm", power, self.mel_fb)  # (B, n_mels, M)
        # Whisper's scaling without its per-clip max clamp (that would make features depend on the window).
        return (torch.log10(mel.clamp_min(1e-10)) + 4.0) / 4.0  # (B, n_mels, M)

    def forward(self, wave: Tensor) -> Tensor:
        """(B, S) with S a multiple of ``samples_per_frame`` -> (B, S // samples_per_frame, out_dim)."""
        if wave.shape[-1] % self.samples_per_frame:
            raise ValueError(
                f"wave length {wave.shape[-1]} is not a multiple of samples_per_frame ({self.samples_per_frame})"
            )
        x = self.conv_in(self.log_mel(wave))  # (B, D, M)
        for block in self.mel_blocks:
            x = block(x)  # (B, D, M)
        x = rearrange(x, "b d (t k) -> b d t k", k=self.mels_per_frame).mean(-1)  # (B, D, T)
        x = self.frame_block(x)  # (B, D, T)
        return self.proj_out(self.norm_out(x.transpose(1, 2)))  # (B, T, out_dim)
