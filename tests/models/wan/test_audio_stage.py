"""The DiT's audio input as the reference computes it: wav2vec2 once over the whole file, normalised over the whole
file, windows sliced from it and mirrored past its end; in bounded windows for long files; a running estimate for
a stream. The oracle is transformers' Wav2Vec2Model run step by step (tests/models/wan/test_audio_features.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from avatargen.families.wan.config import WanAudioFeatures
from avatargen.families.wan.models.audio_features import encode_frames, normalise_with, video_frame_count
from avatargen.families.wan.models.specs import WAV2VEC2_TINY
from avatargen.families.wan.stages.audio import WanAudioStage
from avatargen.io.audio_stats import TrackStats
from avatargen.modules import Module, ModuleSpec
from avatargen.pipeline.audio_timeline import AudioTimeline
from avatargen.runtime.placement import PlacementPlan, RandomInit

pytest.importorskip("transformers")
from tests.models.wan.test_audio_features import reference_features  # noqa: E402

RATE, FPS = 16000, 25


@pytest.fixture(scope="module")
def encoder() -> Module:
    from transformers import Wav2Vec2Config

    from avatargen.families.wan.models.wav2vec2 import Wav2Vec2Encoder

    spec = ModuleSpec("audio_encoder", lambda: Wav2Vec2Encoder(Wav2Vec2Config(**WAV2VEC2_TINY)))
    return Module.place(spec, RandomInit(0), PlacementPlan("none", torch.device("cpu")))


def speech(seconds: float, seed: int = 0) -> np.ndarray:
    g = np.random.default_rng(seed)
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.2 * np.sin(2 * np.pi * 180 * t) * (np.sin(2 * np.pi * 2 * t) > 0) + 0.02 * g.standard_normal(t.size)).astype(np.float32)


def stage(encoder: Module, wave: np.ndarray | None, window_s: float = 60.0, mode=WanAudioFeatures.whole, tracks: int = 1):
    totals = None if wave is None else tuple(TrackStats.of(wave[:, k] if wave.ndim == 2 else wave) for k in range(tracks))
    return WanAudioStage(encoder, RATE, FPS, mode, round(window_s * FPS), margin_frames=12, reach_frames=13,
                         tracks=tracks, totals=totals)  # fmt: skip


def timeline(wave: np.ndarray) -> AudioTimeline:
    return AudioTimeline([wave[i : i + 4000] for i in range(0, len(wave), 4000)], RATE, FPS, 0)


def test_a_file_within_one_window_gets_the_reference_whole_file_features(encoder: Module) -> None:
    wave = speech(3.03)  # 75.75 frames: the reference keeps int(3.03 * 25) = 75 feature frames
    frames = video_frame_count(wave.size, FPS)
    expected = reference_features(encoder.model, torch.from_numpy(wave)[None], frames)[0]  # (75, layers, C)
    windows = stage(encoder, wave).windows(timeline(wave), 0, 78)[0]  # (78, 5, layers, C), past the end too
    assert windows.shape == (78, 5, *expected.shape[1:])
    assert (windows[2:75, 2] - expected[2:75]).abs().max() < 1e-5  # each frame's centre: its own feature
    assert (windows[0, 0] - expected[0]).abs().max() < 1e-5  # before the start: the first feature
    # past the end the reference appends the last features backwards (torch.flip): frame 75 + j is 74 - j
    extended = torch.cat([expected, expected.flip(0)])
    for f in range(70, 78):
        assert (windows[f] - extended[[min(max(f + d, 0), 149) for d in range(-2, 3)]]).abs().max() < 1e-5


def test_long_files_are_heard_in_bounded_windows_that_only_their_own_audio_changes(encoder: Module) -> None:
    wave = speech(4.0)
    audio_stage = stage(encoder, wave, window_s=1.0)  # 25-frame windows, 12 frames of margin each side
    tl, kept = timeline(wave), []
    for start in range(0, 100, 8):  # wan_tiny's clips over the 4 s (100 frames, 4 windows)
        audio_stage.windows(tl, start, start + 13)
        tl.release_before(start - 5 - 12)  # what the engine releases: motion frames and the context margin
        kept.append(len(audio_stage._windows))
    assert max(kept) <= 3  # the windows one clip reaches (the file has 4): bounded by the clip, not the file
    # the features of frames 50..59 (window 2) do not depend on audio more than 12 frames outside 50..75
    changed = wave.copy()
    changed[: 37 * 640] = 0.0
    changed[88 * 640 :] = 0.0
    again = stage(encoder, changed, window_s=1.0)
    again.totals = audio_stage.totals  # the same whole-file statistics: only the windows' audio differs
    tl = timeline(changed)
    assert (again.windows(tl, 52, 58) - audio_stage.windows(timeline(wave), 52, 58)).abs().max() < 1e-6


def test_a_stream_is_normalised_with_what_has_arrived_so_far(encoder: Module) -> None:
    wave = speech(1.0)
    tl = timeline(wave)
    got = stage(encoder, None).windows(tl, 0, 13)  # no whole-file statistics: a stream
    read = tl.statistics()[0]  # the engine's running sums up to the samples the window read
    assert 0 < read.samples <= wave.size
    samples = torch.from_numpy(tl.samples(-12, 25))[None]  # the window: 12 frames of context on each side
    features = encode_frames(encoder.model, normalise_with(samples, read.mean, read.variance), 37)[0]
    assert (got[0, :, 2] - features[12:25]).abs().max() < 1e-6


def test_two_speakers_are_heard_one_track_each(encoder: Module) -> None:
    left, right = speech(1.0, seed=1), speech(1.0, seed=2) * 0.5
    both = np.stack([left, right], axis=1)
    got = stage(encoder, both, tracks=2).windows(timeline(both), 0, 13)  # (1, 2, 13, 5, layers, C)
    assert got.shape[:3] == (1, 2, 13)
    for k, wave in enumerate((left, right)):
        alone = stage(encoder, wave).windows(timeline(wave), 0, 13)
        assert (got[0, k] - alone[0]).abs().max() < 1e-6
