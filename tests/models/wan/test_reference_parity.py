"""avatargen's Wan path against MeiGen-AI's own InfiniteTalk code, run from a checkout (``AVATARGEN_REFERENCE``;
skipped without one): the two-speaker DiT, a dubbing clip's conditioning, colour correction, whole-file audio
features of a 30 s clip. ``python benchmarks/quality/reference_parity.py`` prints the same numbers (docs/wan-parity.md).
Without a checkout, test_recorded_parity.py holds the same bounds against the reference's recorded outputs.

    AVATARGEN_REFERENCE=/path/to/InfiniteTalk python -m pytest -q tests/models/wan/test_reference_parity.py

The reference needs torchvision and, for its wav2vec2 forward, transformers 4.x (it sets ``output_attentions`` on
a model that transformers 5 runs with SDPA): put them first on ``PYTHONPATH`` (see benchmarks/quality/reference_parity.py).
"""

from __future__ import annotations

import pytest

from tests.models.wan.reference_code import reference_root

ROOT = reference_root()
pytestmark = pytest.mark.skipif(ROOT is None, reason="AVATARGEN_REFERENCE does not name an InfiniteTalk checkout")


def test_two_speaker_dit_forward_matches_the_reference():
    from tests.models.wan.reference_parity import dit_two_speakers

    measured = dit_two_speakers(ROOT)
    assert measured["two_speakers"] <= 1e-4 and measured["one_speaker"] <= 1e-4


def test_a_dubbing_clips_conditioning_is_the_references():
    pytest.importorskip("torchvision")
    from tests.models.wan.reference_parity import dubbing_conditioning

    measured = dubbing_conditioning(ROOT)
    assert measured["framed_frame"] == 0.0 and measured["i2v_latent"] <= 1e-5
    assert measured["clip_source_frames"] == measured["reference_source_frames"]


def test_colour_correction_is_match_and_blend_colors():
    pytest.importorskip("torchvision")
    from tests.models.wan.reference_parity import colour_correction

    assert max(colour_correction(ROOT).values()) <= 1e-4  # the reference computes Lab in float32, ours in float64


def test_whole_file_audio_features_of_a_30_s_clip_are_the_references():
    transformers = pytest.importorskip("transformers")
    if int(transformers.__version__.split(".")[0]) >= 5:
        pytest.skip("the reference's wav2vec2 forward runs on transformers 4.x only")
    from tests.models.wan.reference_parity import audio_features

    measured = audio_features(ROOT, seconds=30.0)
    assert measured["frames"] == 750 and measured["features"] <= 1e-4 and measured["tail_mirrored"] <= 1e-4
