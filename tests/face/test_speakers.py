"""Two speakers' regions when none are given: the reference's halves, split between the two faces found."""

from __future__ import annotations

import numpy as np
import pytest

from avatargen.face.detector import face_networks_installed
from avatargen.face.speakers import halves, speaker_boxes


def test_the_reference_halves_are_each_side_inset_by_five_percent():
    assert halves(720, 1280) == [(32, 36, 608, 684), (672, 36, 1248, 684)]  # the reference's face_scale=0.05
    left, right = halves(100, 200, split=80)
    assert left == (4, 5, 76, 95) and right == (86, 5, 194, 95)


@pytest.mark.skipif(not face_networks_installed(), reason="needs the face networks (the eval extra)")
def test_two_faces_split_the_picture_half_way_between_them():
    data = pytest.importorskip("skimage.data")
    face = data.astronaut()[:300, 100:400]  # (300, 300, 3): one face
    picture = np.concatenate([face, np.full((300, 200, 3), 128, np.uint8), face], axis=1)  # faces at x 76-165, 573-663
    notes = []
    (x0, _, x1, _), (x2, _, x3, _) = speaker_boxes(picture, notes.append)
    assert not notes and x0 < 76 and 165 < x1 < x2 < 573 and x3 > 663  # each face in its own region
    assert (x1 + x2) / 2 == pytest.approx((120 + 618) / 2, abs=25)  # split half way between them, not at 400
    single = speaker_boxes(face, notes.append)  # one face: the reference's halves, and a note saying so
    assert single == halves(300, 300) and len(notes) == 1 and "1 face(s)" in notes[0]
