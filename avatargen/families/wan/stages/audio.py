"""The DiT's audio input for a window of video frames: per frame, the 5 wav2vec2 feature frames centred on it, for
each speaker, as the reference computes them, with constant memory.

The reference (``generate_infinitetalk.py``, ``get_embedding``) runs wav2vec2 once over the whole file, normalised
over the whole file, and slices each clip's windows out of it; past the audio's end it repeats the last features
backwards (``torch.flip``). ``model.wan.audio_features`` chooses:

- ``whole`` (default), a file: wav2vec2 hears windows of ``feature_window_s`` on a fixed grid of the timeline, each
  with ``audio_context_s`` more on both sides (none at the file's ends), normalised with the whole track's mean and
  variance (summed over the file before the render, ``RenderInputs.track_stats``). A file no longer than one window
  is one pass over the whole file: the reference's features exactly. At most the windows the current clip reaches are
  kept (60 s of features is 55 MB at full size), so memory does not grow with the duration.
- ``whole``, a stream (``-a -``): the whole track is not known yet, so each clip's window (``audio_context_s`` on
  both sides) is normalised with the mean and variance of everything received so far, a running estimate that
  settles as the stream goes on (the first clips use the first seconds only).
- ``clip``: each clip's window alone, normalised over itself (what avatargen did before; quiet stretches come out
  louder than in the reference).
"""

from __future__ import annotations

import torch
from torch import Tensor

from avatargen.families.wan.config import WanAudioFeatures
from avatargen.families.wan.models.audio_features import (FEATURE_WINDOW, encode_frames, normalise_waveform,
                                                          normalise_with, video_frame_count)  # fmt: skip
from avatargen.modules import Module
from avatargen.io.audio_stats import TrackStats
from avatargen.stages.inputs import AudioSamples


class WanAudioStage:
    """Per-frame audio windows of one render (see the module docstring): ``windows(audio, start, stop)``."""

    def __init__(self, encoder: Module, sample_rate: int, fps: int, mode: WanAudioFeatures, window_frames: int,
                 margin_frames: int, reach_frames: int, tracks: int, totals: tuple[TrackStats, ...] | None):  # fmt: skip
        """``reach_frames``: how far before its first frame a later request may read (a clip's length: the last
        clip's mirrored frames); grid windows that end before that are dropped."""
        self.encoder, self.fps, self.mode = encoder, fps, mode
        self.samples_per_frame = sample_rate // fps
        self.window_frames, self.margin, self.reach = window_frames, margin_frames, reach_frames + FEATURE_WINDOW
        self.tracks, self.totals = tracks, totals
        self.device = encoder.device
        # The reference's feature count (int(seconds * fps), as it computes it): frames past it mirror back.
        self.feature_frames = video_frame_count(totals[0].samples, fps, sample_rate) if totals else None
        self._windows: dict[int, Tensor] = {}  # grid window -> (tracks, frames, layers, C), whole file mode

    @torch.inference_mode()
    def windows(self, audio: AudioSamples, start: int, stop: int) -> Tensor:
        """The DiT's audio for video frames [start, stop): (1, stop - start, 5, layers, C) for one speaker,
        (1, tracks, stop - start, 5, layers, C) for several."""
        half = FEATURE_WINDOW // 2
        centres = torch.arange(start, stop)[:, None] + torch.arange(-half, half + 1)[None, :]  # (F, 5)
        if self.mode == WanAudioFeatures.whole and self.totals is not None:
            self._drop_windows_before(start - self.reach)
            features = self._from_grid(audio, self._mirrored(centres))  # (tracks, F, 5, layers, C)
        else:
            low, high = start - self.margin, stop + self.margin
            window = self._encode_span(audio, low, high, low, high)  # (tracks, high - low, layers, C)
            features = window[:, (centres - low).clamp(0, window.shape[1] - 1)]  # ends repeat, as the reference's
        return features[None] if self.tracks > 1 else features  # (1, [tracks,] F, 5, layers, C)

    def _mirrored(self, indices: Tensor) -> Tensor:
        """Frame indices as the reference reads them: before 0 the first; past the last feature mirrored back."""
        last = self.feature_frames
        indices = torch.where(indices >= last, 2 * last - 1 - indices, indices)
        return indices.clamp(0, max(0, last - 1))

    def _from_grid(self, audio: AudioSamples, indices: Tensor) -> Tensor:
        """Features at ``indices`` (any shape) from the grid windows: (tracks, *indices.shape, layers, C)."""
        size = self.window_frames
        needed = sorted({int(i) // size for i in indices.unique()})
        for w in needed:
            if w not in self._windows:
                self._windows[w] = self._encode_grid_window(audio, w)
        out = None
        for w in needed:
            inside = (indices // size) == w
            part = self._windows[w][:, (indices - w * size).clamp(0, self._windows[w].shape[1] - 1)]
            out = part if out is None else torch.where(inside[None, ..., None, None], part, out)
        return out

    def _drop_windows_before(self, frame: int) -> None:
        for old in [w for w in self._windows if (w + 1) * self.window_frames <= frame]:
            del self._windows[old]  # no later request reads this far back

    def _encode_grid_window(self, audio: AudioSamples, w: int) -> Tensor:
        """Grid window ``w``: frames [w W, (w + 1) W) heard with ``margin`` more on each side, never past the file's
        ends: (tracks, frames of the window, layers, C)."""
        first, last = w * self.window_frames, min((w + 1) * self.window_frames, self.feature_frames)
        low, high = max(0, first - self.margin), last + self.margin
        encoded = self._encode_span(audio, low, high, first, last)
        return encoded[:, first - low : first - low + last - first]

    def _encode_span(self, audio: AudioSamples, low: int, high: int, first: int, last: int) -> Tensor:
        """wav2vec2 over the samples of frames [low, high) (whole file: cut at its end): (tracks, frames, layers, C).

        When the span is the whole file its frame count is the reference's ``int(seconds * fps)``."""
        samples = torch.from_numpy(audio.samples(low, high)).to(self.device)  # (n,) or (n, tracks)
        samples = samples.reshape(samples.shape[0], -1).T  # (tracks, n)
        frames = high - low
        if self.totals is not None and self.mode == WanAudioFeatures.whole:
            end = self.totals[0].samples - low * self.samples_per_frame  # samples of the file from `low` on
            samples = samples[:, : min(samples.shape[1], end)]
            frames = self.feature_frames - low if high >= self.feature_frames else frames
        out = []
        with self.encoder.active() as wav2vec2:
            for track in range(samples.shape[0]):
                out.append(encode_frames(wav2vec2, self._normalised(audio, samples[track : track + 1], track), frames)[0])
        return torch.stack(out)  # (tracks, frames, layers, C)

    def _normalised(self, audio: AudioSamples, samples: Tensor, track: int) -> Tensor:
        if self.mode == WanAudioFeatures.clip:
            return normalise_waveform(samples)
        stats = self.totals[track] if self.totals is not None else audio.statistics()[track]  # a stream: so far
        return normalise_with(samples, stats.mean, stats.variance)
