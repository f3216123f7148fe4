"""A smile closed before the warp drives it (compose/mouth_close.py): its meeting line is smooth at any slant."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from avatargen.compose.mouth_close import close_mouth
from avatargen.face.choice import reference_lips
from avatargen.face.detector import shared_detector
from avatargen.face.lips import Lips
from tests.face import photos

SCALE = 4


@pytest.mark.parametrize("name", ["astronaut", "tilted"])
def test_the_closed_lips_meet_on_a_smooth_line_as_a_closing_at_four_times_the_size_draws_it(name):
    # The oracle: the same closing of the picture upscaled 4x, reduced back (each pixel the mean of its 16 samples).
    # A line drawn pixel by pixel as one lip or the other is a stair-step 66-74 grey levels off it (a slanted smile
    # shows it at 3x); drawn by each lip's share of the pixel, within 41.
    picture = photos.TEST_PHOTOS[name]()
    lips = reference_lips(picture, shared_detector().find(picture)).lips
    closed, shut = close_mouth(picture, lips)
    height, width = picture.shape[:2]
    big = np.asarray(Image.fromarray(picture).resize((width * SCALE, height * SCALE), Image.Resampling.BICUBIC))
    scaled = lambda points: (points + 0.5) * SCALE - 0.5  # pixel centres onto the 4x picture's
    big_closed, _ = close_mouth(big, Lips(scaled(lips.outer), scaled(lips.inner)))
    oracle = np.asarray(Image.fromarray(big_closed).reduce(SCALE)).astype(int)
    ys, xs = np.mgrid[0:height, 0:width]
    line = np.zeros((height, width), bool)  # within 1.5 pixels of the meeting line (the closed inner contour)
    for a, b in zip(shut.inner[:-1], shut.inner[1:]):
        for x, y in a + np.linspace(0, 1, 40)[:, None] * (b - a):
            line |= (np.abs(xs - x) <= 1.5) & (np.abs(ys - y) <= 1.5)
    off = np.abs(closed.astype(int) - oracle).max(axis=2)[line]  # (n,) grey levels
    assert line.sum() > 100 and off.max() <= 50, (off.max(), np.percentile(off, 95))
