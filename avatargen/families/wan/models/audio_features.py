"""InfiniteTalk's audio features: wav2vec2 hidden states of every transformer layer, at the video frame rate.

As in InfiniteTalk's ``generate_infinitetalk.py`` (``get_embedding``) and ``src/audio_analysis/wav2vec2.py``:
16 kHz mono, normalised to zero mean and unit variance (the ``Wav2Vec2FeatureExtractor`` step); the conv feature
encoder's frames (50 per second) linearly resampled, ends aligned, to ``frames`` = duration x fps *before* the
transformer; then the output of each of the transformer layers (12 for chinese-wav2vec2-base), stacked. The DiT then
sees, for each video frame, a window of 5 of these frames centred on it (:func:`frame_windows`).

Loudness: InfiniteTalk first normalises the waveform to -23 LUFS (pyloudnorm). That is one gain for the whole clip,
and the unit-variance step that follows removes any gain, so with ``do_normalize`` (the feature extractor setting
wav2vec2 base folders ship) the -23 LUFS step cannot change the features and is not repeated here; the tests hold
this against pyloudnorm.

The encoder itself is transformers' ``Wav2Vec2Model``, which loads the ``chinese-wav2vec2-base`` folder as users
download it; the resampling is inserted with a forward hook on its conv feature encoder, so its public forward runs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

SAMPLE_RATE = 16000
FEATURE_WINDOW = 5  # wav2vec2 frames the DiT sees per video frame


def normalise_waveform(samples: Tensor) -> Tensor:
    """Zero mean, unit variance per clip (the feature extractor's ``do_normalize``): (B, N) -> (B, N) fp32."""
    x = samples.float()
    mean = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(var + 1e-7)


def resample_frames(features: Tensor, frames: int) -> Tensor:
    """Linear resampling along time with the first and last frames kept: (B, T, C) -> (B, frames, C)."""
    return F.interpolate(features.transpose(1, 2), size=frames, mode="linear", align_corners=True).transpose(1, 2)


def video_frame_count(samples: int, fps: float, sample_rate: int = SAMPLE_RATE) -> int:
    """Video frames the audio covers, rounded down like the reference (``int(duration * fps)``)."""
    return int(samples / sample_rate * fps)


def normalise_with(samples: Tensor, mean: float, variance: float) -> Tensor:
    """``do_normalize`` with statistics of a longer stretch (the whole file): ``(x - mean) / sqrt(var + 1e-7)``,
    computed in float64 like the reference's numpy step, returned fp32."""
    return ((samples.double() - mean) / (variance + 1e-7) ** 0.5).float()


@torch.no_grad()
def encode_frames(encoder: nn.Module, normalised: Tensor, frames: int) -> Tensor:
    """Normalised waveform (B, N) -> features of every transformer layer at ``frames`` steps: (B, frames, layers, C).

    The conv encoder's frames are resampled (linear, ends aligned) to ``frames`` before the transformer, inserted
    with a forward hook on transformers' conv feature encoder so that its public forward runs."""
    if frames < 1:
        raise ValueError(f"audio of {normalised.shape[-1]} samples gives no video frame")

    def resample(_module: nn.Module, _inputs: tuple, conv: Tensor) -> Tensor:
        return resample_frames(conv.transpose(1, 2), frames).transpose(1, 2)  # (B, C, frames)

    hook = encoder.feature_extractor.register_forward_hook(resample)
    try:
        out = encoder(normalised, output_hidden_states=True)
    finally:
        hook.remove()
    return torch.stack(out.hidden_states[1:], dim=2)  # (B, frames, layers, hidden): outputs of layers 1..L


def wav2vec2_frame_features(encoder: nn.Module, samples: Tensor, fps: float = 25.0, normalise: bool = True) -> Tensor:
    """Waveform -> per-video-frame features of every transformer layer, as the reference's ``get_embedding``.

    Args:
        encoder: a transformers ``Wav2Vec2Model`` (in eval mode).
        samples: (B, N) 16 kHz mono.
        fps: video frame rate the features are resampled to.
        normalise: zero mean / unit variance first (the folder's ``preprocessor_config.json`` ``do_normalize``).

    Returns:
        (B, frames, layers, hidden) with ``frames = int(N / 16000 * fps)``.
    """
    frames = video_frame_count(samples.shape[-1], fps)
    if frames < 1:
        raise ValueError(f"audio of {samples.shape[-1]} samples is shorter than one video frame at {fps} fps")
    return encode_frames(encoder, normalise_waveform(samples) if normalise else samples.float(), frames)


def frame_windows(features: Tensor, start: int, stop: int, window: int = FEATURE_WINDOW) -> Tensor:
    """The DiT's audio input for video frames [start, stop): each frame's ``window`` features centred on it.

    ``features`` (frames, layers, hidden) -> (stop - start, window, layers, hidden); indices past either end of the
    audio repeat its first / last frame, as in the reference.
    """
    if window % 2 == 0:
        raise ValueError(f"window must be odd, got {window}")
    half = window // 2
    centres = torch.arange(start, stop, device=features.device)[:, None]  # (F, 1)
    offsets = torch.arange(-half, half + 1, device=features.device)[None, :]  # (1, window)
    indices = (centres + offsets).clamp(0, features.shape[0] - 1)  # (F, window)
    return features[indices]  # (F, window, layers, hidden)
