"""avatargen eval's mouth spill: darkening inside the lips' reach scores 0, a cavity painted on the chin is caught,
wherever the head has moved."""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw

from avatargen.eval.mouth_spill import SPILL_SHARE, MouthSpill, similarity
from avatargen.face.choice import reference_lips
from avatargen.face.detector import shared_detector
from tests.face import photos


def test_similarity_recovers_a_rotation_scale_and_shift():
    points = np.array([[10.0, 20.0], [50.0, 22.0], [30.0, 60.0], [12.0, 70.0], [44.0, 41.0]])
    angle, scale, shift = np.radians(7.0), 1.3, np.array([5.0, -3.0])
    rotation = scale * np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    matrix = similarity(points, points @ rotation.T + shift)
    assert np.allclose(matrix, np.hstack([rotation, shift[:, None]]), atol=1e-9)


def _moved(picture: np.ndarray, degrees: float, shift: tuple[int, int]) -> np.ndarray:
    """``picture`` turned about the astronaut's face and shifted, as idle motion moves a head."""
    image = Image.fromarray(picture).rotate(degrees, Image.Resampling.BICUBIC, center=photos.ASTRONAUT_FACE,
                                            translate=shift, fillcolor=(96, 96, 104))  # fmt: skip
    return np.asarray(image)


def _with_dark(frame: np.ndarray, box: tuple[float, float, float, float]) -> np.ndarray:
    image = Image.fromarray(frame)
    ImageDraw.Draw(image).ellipse(box, fill=(25, 12, 15))
    return np.asarray(image)


def test_a_cavity_between_the_lips_scores_no_spill_and_one_on_the_chin_does():
    picture = photos.astronaut()
    detector = shared_detector()
    face = detector.find(picture)
    spill = MouthSpill(picture, face, reference_lips(picture, face).lips)
    moved = _moved(picture, 4.0, (6, -4))
    follow = detector.find(moved)
    to_frame = similarity(face.points, follow.points)
    # The mouth (centre 224, 146 in the picture; 43 px wide) where the head carried it; the chin 30 px below it.
    mouth = to_frame[:, :2] @ np.array([224.0, 147.0]) + to_frame[:, 2]
    chin = to_frame[:, :2] @ np.array([222.0, 178.0]) + to_frame[:, 2]
    between_lips = _with_dark(moved, (mouth[0] - 14, mouth[1] - 3, mouth[0] + 14, mouth[1] + 5))
    on_the_chin = _with_dark(moved, (chin[0] - 16, chin[1] - 4, chin[0] + 16, chin[1] + 6))
    for frame in (moved, between_lips, on_the_chin):
        spill.update(frame, detector.find(frame))
    still, inside, outside = spill.spill
    assert still == 0.0 and inside == 0.0  # the moved head alone darkens nothing; a cavity in the mouth is in reach
    assert outside > 0.8  # the crescent on the chin: nearly all of the darkening is out of the lips' reach
    assert spill.summary()["mouth_spill_frames"] == round(1 / 3, 4) and SPILL_SHARE == 0.15
