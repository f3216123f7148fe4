"""avatargen's Wan path against what MeiGen-AI's own InfiniteTalk code computed, recorded at toy size into
fixtures/ (tests/models/wan/record_reference.py; recorded_parity.py rebuilds the same weights and inputs): the
bounds of test_reference_parity.py, which runs the reference live where a checkout is given. No checkout, no
torchvision, and any transformers: the reference's outputs are in the fixtures."""

from __future__ import annotations

import pytest

from tests.models.wan import recorded_parity


def test_two_speaker_dit_forward_matches_the_references_recording():
    measured = recorded_parity.dit_two_speakers()
    assert measured["two_speakers_scale"] > 0.5 and measured["one_speaker_scale"] > 0.5  # outputs that say something
    assert measured["two_speakers"] <= 1e-4 and measured["one_speaker"] <= 1e-4


def test_a_dubbing_clips_conditioning_is_the_references_recording():
    measured = recorded_parity.dubbing_conditioning()
    assert measured["bucket"] == measured["reference_bucket"] == [448, 896]
    assert measured["framed_frame_digest_equal"] and measured["framed_frame_sample"] == 0.0
    assert measured["i2v_latent"] <= 1e-5
    assert measured["clip_source_frames"] == measured["reference_source_frames"]


def test_colour_correction_is_the_recorded_match_and_blend_colors():
    assert max(recorded_parity.colour_correction().values()) <= 1e-4  # the reference's Lab in float32, ours float64


def test_whole_file_audio_features_of_a_30_s_clip_are_the_references_recording():
    pytest.importorskip("transformers")  # ours runs wav2vec2 through transformers (the wan extra)
    measured = recorded_parity.audio_features()
    assert measured["frames"] == 750 and measured["scale"] > 0.5
    assert measured["features"] <= 1e-4 and measured["tail_mirrored"] <= 1e-4


def test_weights_rebuilt_otherwise_than_recorded_are_named_not_measured():
    from avatargen.families.wan.models.params import vae_params
    from avatargen.families.wan.models.vae import WanVAE

    _, meta = recorded_parity.read_fixture("infinitetalk_dubbing")
    with pytest.raises(recorded_parity.StaleFixture, match="seeded weights differs from the recording"):
        recorded_parity._load_seeded(WanVAE(vae_params("wan_tiny")), meta, meta["vae_seed"] + 1, prefix="vae_")
    _, dit_meta = recorded_parity.read_fixture("infinitetalk_dit")
    with pytest.raises(recorded_parity.StaleFixture, match="layout differs from the recording"):
        recorded_parity._load_seeded(WanVAE(vae_params("wan_tiny")), dit_meta, dit_meta["seed"])  # not the DiT's
