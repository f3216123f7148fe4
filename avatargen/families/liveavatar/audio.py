"""LiveAvatar's audio features: every wav2vec2 hidden state (25 for wav2vec2-large) at each video frame.

The reference (``AudioEncoder.extract_audio_feat`` + ``get_audio_embed_bucket_fps``) runs wav2vec2 once over the
whole file, interpolates its 50 Hz states to 30 Hz and takes, for video frame k at 25 fps, the 30 Hz state
``round(1.2 k)``. A stream cannot hear the whole file, so each block's window is encoded with ``audio_context_s`` of
audio on each side (normalised over that window) and frame k reads the 50 Hz states linearly interpolated at the same
instant, ``round(1.2 k) / 30`` s: the same time points, without the whole-file normalisation and the 30 Hz
resampling's end alignment.
"""

from __future__ import annotations

import torch
from torch import Tensor

from avatargen.families.wan.models.audio_features import normalise_waveform
from avatargen.modules import Module

STATE_RATE = 50  # wav2vec2 hidden states per second
REFERENCE_RATE = 30  # the reference's intermediate rate


class BlockAudio:
    """wav2vec2 states of a block's video frames: (1, layers, C, frames)."""

    def __init__(self, encoder: Module, sample_rate: int, fps: int, context_frames: int):
        self.encoder, self.sample_rate, self.fps, self.context = encoder, sample_rate, fps, context_frames

    @torch.inference_mode()
    def features(self, audio, start: int, stop: int) -> Tensor:
        """States of frames [start, stop) (``audio``: the engine's AudioTimeline)."""
        low = max(0, start - self.context)
        samples = torch.from_numpy(audio.samples(low, stop + self.context)).float()
        samples = samples.reshape(samples.shape[0], -1)[:, 0][None]  # (1, N), the first track
        with self.encoder.active() as wav2vec2:
            device = next(wav2vec2.parameters()).device
            out = wav2vec2(normalise_waveform(samples).to(device), output_hidden_states=True)
        states = torch.stack(out.hidden_states, dim=1)[0].float()  # (layers, T50, C)
        frames = torch.arange(start, stop, dtype=torch.float64)
        seconds = torch.round(frames * REFERENCE_RATE / self.fps) / REFERENCE_RATE - low / self.fps
        position = (seconds * STATE_RATE).clamp(0, states.shape[1] - 1)  # (frames,) in 50 Hz steps
        left = position.floor().long()
        right = (left + 1).clamp(max=states.shape[1] - 1)
        weight = (position - left).float().to(states.device)[None, :, None]
        picked = states[:, left] * (1 - weight) + states[:, right] * weight  # (layers, frames, C)
        return picked.permute(0, 2, 1)[None]  # (1, layers, C, frames)
