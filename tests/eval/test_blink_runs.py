"""A hazy print's blinks are counted: the lid covers a pupil and iris barely darker than the skin, so the eyes' dark
rises only a little, and for one frame over the threshold and the next a little under it. Such a run counts, once;
a lone frame that passes the threshold does not (a face chip misplaced for a frame)."""

from __future__ import annotations

import numpy as np

from avatargen.eval.blinks import measure_blinks

FPS = 25


def _eyes_and_dark(rises: dict[int, tuple[float, ...]]) -> tuple[np.ndarray, np.ndarray]:
    """20 s of still eyes (openness 1, the dark 0.2, both with noise of 0.004) and the dark risen by ``rises``
    (first frame -> the rise of it and the frames after it) in both bands."""
    rng = np.random.default_rng(0)
    frames = 20 * FPS
    eyes = 1.0 + 0.004 * rng.standard_normal(frames)
    dark = 0.2 + 0.004 * rng.standard_normal((frames, 2))
    for first, rise in rises.items():
        dark[first : first + len(rise)] += np.array(rise)[:, None]
    return eyes, dark


def test_a_faint_blink_over_two_frames_counts_once_and_a_lone_frame_does_not():
    blinks = {40 + 60 * k: (0.02, 0.034) for k in range(6)}  # the low-contrast photo's: one frame over 0.03
    eyes, dark = _eyes_and_dark({**blinks, 420: (0.05,)})  # ... and a lone frame far over it
    assert measure_blinks(eyes, FPS, dark)["blinks"] == 6  # 0 when every frame of a run had to pass
