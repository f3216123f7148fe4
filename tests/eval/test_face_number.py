"""``--face N --eval`` measures the face the render animated: the tracker follows face N (left to right) through the
video, not the most confident face of each frame."""

from __future__ import annotations

from avatargen.eval.face_track import FaceTracker
from avatargen.face.detector import shared_detector
from tests.face.photos import two_people


def test_the_tracker_follows_the_face_asked_for():
    picture = two_people()  # the astronaut on the left (smaller), Grace Hopper on the right
    detector = shared_detector()
    faces = detector.find_all(picture)  # left to right (her mission patch reads as a face too)
    assert len(faces) >= 2
    for number, expected in enumerate(faces, start=1):
        tracker = FaceTracker(detector, embed_every=10, number=number)
        for index in range(3):
            found = tracker.update(index, picture)
            assert found is not None and abs(found.centre[0] - expected.centre[0]) < 0.2 * expected.width, number
    assert FaceTracker(detector, embed_every=10).update(0, picture).box == detector.find(picture).box  # unchanged
