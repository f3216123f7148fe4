"""``pipeline.image_fit=face``: frame the model's square input around the face, wherever it is in the image.

The bundled model was trained on frames drawn by ``avatargen.data``, where the face sits at a fixed place and size.
Measured with the same detector on 33 neutral-pose training identities (seeds 0-39, 256x256; seven were not
detected): the centre of the four eye corners is at ``EYES_AT`` = (0.498, 0.388) of the frame (std 0.002, 0.010)
and the face box is ``FACE_WIDTH`` = 0.477 of its side (std 0.022). ``frame_face`` crops the square that puts the
reference's face there, padding with the edge pixels where the square leaves the image, so a half-body portrait,
a landscape frame or an off-centre face become the framing the model knows. An image already framed that way
(within ``ALREADY_FRAMED``) is kept whole, so training-style avatars render exactly as with ``image_fit=crop``.

No face found, or no detector installed: the centre crop of ``image_fit=crop`` with a one-line warning.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from avatargen.face.choice import choose_face
from avatargen.face.detector import INSTALL_HINT, Face, FaceDetector, face_networks_installed, shared_detector
from avatargen.face.picture_cache import KnownPicture

EYES_AT = (0.498, 0.388)  # (x, y) of the eye centre, fractions of the training frame
FACE_WIDTH = 0.477  # detector box width, fraction of the training frame's side
# A crop within this fraction of the image side from the whole square image: the image is framed already; keep it.
# The detector's box varies from face to face (it is 15 % narrower than the mean on examples/avatar_1.png).
ALREADY_FRAMED = 0.2


class Framing(NamedTuple):
    """What ``frame_face`` cut: the ``crop`` (S, S, 3), the ``face`` found in the image (None: none, centre crop),
    the ``square`` (left, top, side) of the image the crop covers (it may reach past the image's edges) and the
    ``picture`` it was cut from (the image, turned upright where it lay on its side: ``choose_face``), and the
    quarter ``turns`` that stood it upright (``np.rot90``'s k; 0: none)."""

    crop: np.ndarray
    face: Face | None
    square: tuple[int, int, int]
    picture: np.ndarray
    turns: int = 0


def frame_face(rgb: np.ndarray, warn: Callable[[str], None], name: str = "the reference image",
               detector: FaceDetector | None = None, number: int | None = None) -> Framing:  # fmt: skip
    """The square around the face of ``rgb`` (H, W, 3) uint8 as the model was trained to see it -> (S, S, 3), the
    face found in ``rgb`` (None: no face, centre crop, ``warn`` called with one line) and where the square is.
    ``number``: which face to frame, 1-based, left to right (None: the largest; ``choose_face``)."""
    known = KnownPicture(rgb)  # a picture searched before with these networks: neither they nor dlib are loaded
    if detector is None and not known.searched and not face_networks_installed():
        warn(f"warning: pipeline.image_fit=face needs the face detector ({INSTALL_HINT}); centre-cropped {name}")
        return Framing(centre_crop(rgb), None, centre_square(rgb), rgb)
    rgb, face, turns = choose_face(rgb, detector or shared_detector(), warn, name, number, known)
    if face is None:
        warn(f"warning: no face found in {name}; centre-cropped it: the model draws a front-facing face where it "
             "expects one, from the picture's colours (docs/model-card.md; give a front-facing portrait, or "
             "pipeline.image_fit=crop or pad to frame it yourself)")  # fmt: skip
        return Framing(centre_crop(rgb), None, centre_square(rgb), rgb)
    square = kept_square(rgb, *face_square(face))
    return Framing(crop_square(rgb, *square), face, square, rgb, turns)


def face_square(face: Face) -> tuple[int, int, int]:
    """(left, top, side) in pixels of the square that frames ``face`` like the training frames."""
    side = face.width / FACE_WIDTH
    eye_x, eye_y = face.points[:4].mean(axis=0)
    return int(round(eye_x - EYES_AT[0] * side)), int(round(eye_y - EYES_AT[1] * side)), max(1, int(round(side)))


def kept_square(rgb: np.ndarray, left: int, top: int, side: int) -> tuple[int, int, int]:
    """The square ``crop_square`` cuts for (left, top, side): the whole image when the square is within
    ``ALREADY_FRAMED`` of a square image, else the square itself."""
    height, width = rgb.shape[:2]
    tolerance = ALREADY_FRAMED * max(height, width)
    if height == width and max(abs(left), abs(top), abs(side - width)) <= tolerance:
        return 0, 0, width
    return left, top, side


def crop_square(rgb: np.ndarray, left: int, top: int, side: int) -> np.ndarray:
    """``rgb``[top : top + side, left : left + side], edge-padded where the square leaves the image; the whole
    image instead when the square is within ``ALREADY_FRAMED`` of it."""
    height, width = rgb.shape[:2]
    left, top, side = kept_square(rgb, left, top, side)
    if (left, top, side) == (0, 0, width) and height == width:
        return rgb
    pad = ((max(0, -top), max(0, top + side - height)), (max(0, -left), max(0, left + side - width)), (0, 0))
    padded = np.pad(rgb, pad, mode="edge") if any(p for pair in pad[:2] for p in pair) else rgb
    top, left = top + pad[0][0], left + pad[1][0]
    return np.ascontiguousarray(padded[top : top + side, left : left + side])


def centre_square(rgb: np.ndarray) -> tuple[int, int, int]:
    """(left, top, side) of the largest centred square of ``rgb``."""
    height, width = rgb.shape[:2]
    side = min(height, width)
    return (width - side) // 2, (height - side) // 2, side


def centre_crop(rgb: np.ndarray) -> np.ndarray:
    """The largest centred square of ``rgb``."""
    left, top, side = centre_square(rgb)
    return rgb[top : top + side, left : left + side]


class SquareFraming:
    """The square a reference was cut from (``Reference.crop``: left, top, side in the picture's pixels), resized to
    ``size``: how a source video's later frames and the speakers' boxes are framed like the reference
    (``pipeline.image_fit``; the ``Framing`` of avatargen/pipeline/inputs.py)."""

    def __init__(self, crop: tuple[int, int, int], size: int) -> None:
        self.crop, self.size = crop, size

    def picture(self, rgb: np.ndarray) -> np.ndarray:
        from PIL import Image

        square = crop_square(rgb, *self.crop)
        if square.shape[0] != self.size:
            square = np.asarray(Image.fromarray(square).resize((self.size, self.size), Image.Resampling.LANCZOS))
        return np.ascontiguousarray(square)

    def box(self, box: tuple[float, float, float, float]) -> tuple[float, float, float, float]:
        left, top, side = self.crop
        scale = self.size / side
        clip = lambda v: min(max(v, 0.0), float(self.size))  # noqa: E731
        x0, y0, x1, y1 = box
        return clip((x0 - left) * scale), clip((y0 - top) * scale), clip((x1 - left) * scale), clip((y1 - top) * scale)
