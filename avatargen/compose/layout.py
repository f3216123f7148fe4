"""``FaceLayout``: where the face is in one frame, in that frame's pixels (x to the right, y down)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from avatargen.face.detector import Face
from avatargen.face.framing import FACE_WIDTH

# The five landmarks of the training frames, fractions of the frame's side (x, y), dlib's order. Measured as
# ``framing.EYES_AT`` was: the detector on 33 neutral-pose training identities (seeds 0-39 at 256x256; seven not
# detected); std 0.004-0.014 of the side per coordinate. Their eye centre is ``EYES_AT``.
CANONICAL_POINTS = ((0.633, 0.385), (0.550, 0.389), (0.363, 0.386), (0.447, 0.390), (0.499, 0.524))


@dataclass(frozen=True)
class FaceLayout:
    """The five landmarks of a face (dlib's order: two corners of the eye on the image's right, two of the other eye,
    the base of the nose) and the width of its detector box, in pixels of the frame they describe."""

    points: np.ndarray  # (5, 2) float64, (x, y)
    face_width: float

    @classmethod
    def from_face(cls, face: Face) -> "FaceLayout":
        return cls(np.asarray(face.points, dtype=np.float64), float(face.width))

    @classmethod
    def canonical(cls, side: float) -> "FaceLayout":
        """The layout of the face in a ``side`` x ``side`` frame framed like the training frames (the bundled model's
        output): for frames where no face was detected but the model's framing is known."""
        return cls(np.asarray(CANONICAL_POINTS, dtype=np.float64) * float(side), FACE_WIDTH * float(side))

    @property
    def eye_right(self) -> np.ndarray:
        """(x, y) centre of the eye on the image's right."""
        return self.points[0:2].mean(axis=0)

    @property
    def eye_left(self) -> np.ndarray:
        """(x, y) centre of the eye on the image's left."""
        return self.points[2:4].mean(axis=0)

    @property
    def nose(self) -> np.ndarray:
        return self.points[4]

    def moved(self, scale: float, offset: tuple[float, float]) -> "FaceLayout":
        """The same face in a frame scaled by ``scale`` and then shifted by ``offset`` (x, y) pixels."""
        return FaceLayout(self.points * scale + np.asarray(offset, dtype=np.float64), self.face_width * scale)
