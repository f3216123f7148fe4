"""The contact sheet's choice of frames: a long render shows its face 2 minutes in, and the mouth sheet one frame per
loud syllable."""

from __future__ import annotations

import numpy as np

from avatargen.eval.sheet import choose_frames, loudest_frames


def _result(seconds: float, loudness: np.ndarray | None = None, fps: float = 25.0) -> dict:
    n = int(seconds * fps)
    loud = np.abs(np.sin(np.arange(n) / 7.0)) if loudness is None else loudness
    return {"frames": n, "fps": fps, "curves": {"loudness": loud.tolist(), "change": [0.0] * n}}


def test_a_render_longer_than_two_minutes_shows_the_frame_two_minutes_in() -> None:
    picks = dict((label, t) for label, t in choose_frames(_result(125.0)))
    assert picks["2 min"] == 3000 and picks["end"] == 3124
    assert "2 min" not in dict(choose_frames(_result(60.0)))  # nothing to show there on a 1-minute render


def test_the_loudest_tile_is_the_loudest_frame() -> None:
    loud = np.full(250, 0.1)
    loud[137] = 1.0
    assert ("loudest", 137) in choose_frames(_result(10.0, loud))


def test_loudest_frames_are_one_per_syllable_loudest_first() -> None:
    loud = np.zeros(250)
    for centre, peak in ((40, 0.5), (100, 1.0), (180, 0.8)):  # three syllables, each several frames loud
        loud[centre - 3 : centre + 4] = peak * np.array([0.6, 0.8, 0.95, 1.0, 0.95, 0.8, 0.6])
    assert loudest_frames(_result(10.0, loud), 3) == [100, 180, 40]
    assert len(loudest_frames(_result(10.0, loud), 10)) <= 7  # frames of one syllable within 0.2 s are not repeated


def test_the_seam_shown_is_the_worst_of_the_seams_named_over_a_blind_find() -> None:
    """The blind search can take a cartoon jaw's bursts for a stride (docs/eval.md, Limits): the sheet shows the
    worst of the seams the render or the user named (``--seams``), not of those."""
    result = _result(20.0)
    change = np.zeros(500)
    change[[185, 370]] = 0.9  # a stride found blind that is no chunk boundary
    change[[14, 18, 30, 34]] = [0.2, 0.5, 0.3, 0.1]
    result["curves"]["change"] = change.tolist()
    result.update(seams_known=[14, 18, 30, 34], seam_frames=[185, 370])
    picks = choose_frames(result)
    assert ("before seam", 17) in picks and ("after seam", 18) in picks
    del result["seams_known"]
    assert ("after seam", 185) in choose_frames(result)  # nothing named: the blind find's
