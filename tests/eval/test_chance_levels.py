"""The eval's findings on a real render's signals are held to the render's own chance level: the blind seam search
reports no stride in a seam-free two-minute render (the codec's keyframe pops left out) but finds a faint one planted
in it, and lip sync names no offset for a mouth played with another sentence but finds it with its own.

``data/render_125s_changes.npz`` holds the change into each frame (``changes``, as ``avatargen eval`` computes it)
and the keyframes of ``avatargen render -i examples/avatar_1.png -a speech_125s.wav`` (the three example sentences
looped to 125 s, ``benchmarks/quality/model_quality.py``'s ``long_audio``; bf16 on an AMX CPU). Its chunk seams are
invisible, yet the search once reported the 16-frame chunk stride here (z 11.43, excess 1.23): the encoder's
keyframes, one at each checkpoint and one a GOP later, fall at two fixed phases of the chunk grid, and their pops
(excess 1.32-1.34 against 1.00 at the same phases' other frames) made the stride. Its best stride without them
(z 7.90, excess 1.58) clears the old fixed bar of z >= 6 but not this video's chance level.

``data/render_8s_sync.npz`` holds the mouth opening the eval tracked in ``avatargen render -i examples/avatar_1.png
-a examples/speech_1.flac`` (8 s) and the loudness of speech_1 (``rms_own``) and speech_2 (``rms_other``) per frame.
Against speech_2 the old rule (the peak only had to beat the best of 24 out-of-sync scores by 0.05) reported an
offset of 8 frames. ``data/render_4s_photo_sync.npz``: the same for 4 s of the model's own square of a photograph
(``skimage``'s astronaut, ``pipeline.composite=false``) and its speech, a short clip whose mouth follows the speech
less well.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from avatargen.eval.seams import CHANGE_FLOOR, MIN_EXCESS, MIN_Z, find_periodic_seams
from avatargen.eval.sync import MIN_CHANCE_Z, measure_sync

FPS = 25.0
DATA = Path(__file__).with_name("data")


@pytest.fixture(scope="module")
def render() -> tuple[np.ndarray, list[int]]:
    data = np.load(DATA / "render_125s_changes.npz")
    return data["changes"].astype(np.float64), [int(k) for k in data["keyframes"]]


@pytest.fixture(scope="module")
def searched(render) -> dict:
    """The blind search of the render, told its keyframes (as ``avatargen eval`` is)."""
    changes, keyframes = render
    return find_periodic_seams(changes, keyframes, FPS)


def test_a_seam_free_two_minute_render_reports_no_stride_though_its_best_beats_a_fixed_bar(searched) -> None:
    result = searched
    assert result["seams_found"] is False and result["seam_frames"] == []
    # The best stride clears the old fixed bar (z >= 6, excess >= 1.2); the video's own chance level is higher.
    assert result["seam_z"] >= MIN_Z and result["seam_excess"] >= MIN_EXCESS
    assert result["seam_z"] < result["seam_z_threshold"]


def test_the_codecs_keyframe_pops_make_the_chunk_stride_unless_they_are_known_as_keyframes(render, searched) -> None:
    changes, keyframes = render
    untold = find_periodic_seams(changes, [], FPS)
    assert untold["seams_found"] is True and untold["seam_period_frames"] == 16
    assert 0.4 <= np.isin(untold["seam_frames"], keyframes).mean() <= 0.6  # every other frame of it a keyframe
    assert searched["seams_found"] is False


@pytest.mark.parametrize("period, phase, factor", [(16, 5, 1.3), (50, 20, 1.5)])
def test_a_faint_stride_planted_in_the_same_render_is_found(render, period: int, phase: int, factor: float) -> None:
    changes, keyframes = render
    seamed = changes.copy()
    seamed[phase::period] = (seamed[phase::period] + CHANGE_FLOOR) * factor - CHANGE_FLOOR  # excess x factor
    result = find_periodic_seams(seamed, keyframes, FPS)
    assert result["seams_found"] is True
    assert result["seam_period_frames"] == period
    assert set(result["seam_frames"]) >= set(range(phase + period, len(changes) - period, period)) - set(keyframes)


def test_a_mouth_played_with_another_sentence_has_no_offset_and_with_its_own_it_is_in_sync() -> None:
    data = np.load(DATA / "render_8s_sync.npz")
    mouth = data["mouth"].astype(np.float64)
    own = measure_sync(mouth, data["rms_own"].astype(np.float64), FPS)
    assert own["offset_frames"] == 0 and own["sync_note"] is None
    other = measure_sync(mouth, data["rms_other"].astype(np.float64), FPS)
    assert other["offset_frames"] is None
    assert "not clearly above chance" in other["sync_note"]
    # The peak beats the best out-of-sync score by the margin, yet sits only a few spreads above their mean.
    assert other["sync_confidence"] > other["sync_chance_max"] + 0.05
    assert other["sync_confidence"] < other["sync_chance"] + MIN_CHANCE_Z * other["sync_chance_sd"]


def test_a_short_clip_whose_mouth_follows_its_speech_less_well_keeps_its_offset() -> None:
    data = np.load(DATA / "render_4s_photo_sync.npz")
    result = measure_sync(data["mouth"].astype(np.float64), data["rms"].astype(np.float64), FPS)
    assert result["offset_frames"] == 0 and result["sync_note"] is None
