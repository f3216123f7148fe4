"""InfiniteTalk's audio feature path against transformers' Wav2Vec2 (toy config, random weights, fp32)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from avatargen.families.wan.models.audio_features import frame_windows, normalise_waveform, wav2vec2_frame_features

@pytest.fixture(scope="module")
def transformers():
    return pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def encoder(transformers):
    torch.manual_seed(0)
    config = transformers.Wav2Vec2Config(
        hidden_size=16, num_hidden_layers=3, num_attention_heads=2, intermediate_size=32,
        conv_dim=(8, 8), conv_kernel=(10, 3), conv_stride=(5, 2), num_conv_pos_embeddings=8,
        num_conv_pos_embedding_groups=2, feat_extract_norm="group", do_stable_layer_norm=False,
    )  # fmt: skip
    return transformers.Wav2Vec2Model(config).eval()


def speech(seconds: float, seed: int = 0) -> torch.Tensor:
    return 0.3 * torch.randn(1, int(16000 * seconds), generator=torch.Generator().manual_seed(seed))


def reference_features(model, samples: torch.Tensor, frames: int) -> torch.Tensor:
    """InfiniteTalk's order of operations, step by step through the model's parts."""
    with torch.no_grad():
        conv = model.feature_extractor(normalise_waveform(samples)).transpose(1, 2)  # (B, T, C)
        conv = F.interpolate(conv.transpose(1, 2), size=frames, mode="linear", align_corners=True).transpose(1, 2)
        hidden, _ = model.feature_projection(conv)
        hidden = model.encoder.layer_norm(hidden + model.encoder.pos_conv_embed(hidden))
        outputs = []
        for layer in model.encoder.layers:
            hidden = layer(hidden)
            hidden = hidden[0] if isinstance(hidden, tuple) else hidden
            outputs.append(hidden)
    return torch.stack(outputs, dim=2)  # (B, frames, layers, hidden)


def test_features_are_every_layer_resampled_to_the_video_rate(encoder) -> None:
    samples = speech(0.52)  # 13 video frames at 25 fps; the conv encoder gives ~26 frames
    got = wav2vec2_frame_features(encoder, samples, fps=25)
    assert got.shape == (1, 13, 3, 16)
    assert (got - reference_features(encoder, samples, 13)).abs().max().item() <= 1e-5


def test_without_resampling_the_features_are_transformers_hidden_states(encoder) -> None:
    samples = speech(0.5, seed=1)
    with torch.no_grad():
        native = encoder(normalise_waveform(samples), output_hidden_states=True)
    frames = native.last_hidden_state.shape[1]
    got = wav2vec2_frame_features(encoder, samples, fps=frames / 0.5)
    expected = torch.stack(native.hidden_states[1:], dim=2)
    assert (got - expected).abs().max().item() <= 1e-5
    assert (got[:, :, -1] - native.last_hidden_state).abs().max().item() <= 1e-5


def test_waveform_normalisation_matches_the_feature_extractor(transformers) -> None:
    samples = speech(0.25, seed=2) + 0.1
    extractor = transformers.Wav2Vec2FeatureExtractor(do_normalize=True)
    expected = torch.tensor(extractor(samples[0].numpy(), sampling_rate=16000).input_values[0])
    assert (normalise_waveform(samples)[0] - expected).abs().max().item() <= 1e-5


def test_frame_windows_repeat_the_ends() -> None:
    features = torch.arange(6.0)[:, None, None]  # (frames, layers, hidden)
    windows = frame_windows(features, 0, 6)
    assert windows[0].flatten().tolist() == [0, 0, 0, 1, 2]
    assert windows[3].flatten().tolist() == [1, 2, 3, 4, 5]
    assert windows[5].flatten().tolist() == [3, 4, 5, 5, 5]


def test_loudness_normalisation_cannot_change_the_features(encoder) -> None:
    """InfiniteTalk normalises to -23 LUFS before the feature extractor's unit-variance step; that step removes it."""
    pyloudnorm = pytest.importorskip("pyloudnorm")
    samples = speech(0.6, seed=3) * 0.05
    meter = pyloudnorm.Meter(16000)
    audio = samples[0].double().numpy()
    louder = pyloudnorm.normalize.loudness(audio, meter.integrated_loudness(audio), -23.0)
    assert abs(louder.std() / audio.std() - 1) > 0.5  # the -23 LUFS step really changes the waveform
    reference = wav2vec2_frame_features(encoder, torch.from_numpy(louder).float()[None])
    assert (wav2vec2_frame_features(encoder, samples) - reference).abs().max().item() <= 1e-4
