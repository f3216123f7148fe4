"""One face detector for the whole project: dlib's HOG face detector, 5-point landmarks and face-recognition ResNet.

All three networks come from PyPI with their weights inside the packages (``dlib-bin`` for the detector,
``face-recognition-models`` for the two ``.dat`` files), installed by the ``avatargen[eval]`` extra. Licences: dlib
is Boost-licensed; the 5-point shape predictor and the ResNet (``dlib_face_recognition_resnet_model_v1``) were
released by dlib's author into the public domain (dlib-models README). The 68-point predictor that ships in the same package is
deliberately not used: it was trained on iBUG 300-W, whose licence excludes commercial use.

``FaceDetector().find(rgb)`` gives the most confident face of an image as a ``Face`` (box, five points, score);
``chip(rgb, face)`` the face aligned and scaled the way the ResNet expects it; ``embedding(rgb, face)`` its 128-d
descriptor. Two descriptors closer than ``SAME_PERSON_DISTANCE`` (Euclidean) are the same person by dlib's
documented threshold: 0.6 gives 99.38 % accuracy on the LFW benchmark (real photographs; see docs/eval.md for what
it means on cartoon avatars).
"""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from avatargen.errors import BadInputError
from avatargen.face.hog_cache import frontal_face_detector

SAME_PERSON_DISTANCE = 0.6  # dlib's threshold for its ResNet descriptors (LFW: 99.38 % at this distance)
INSTALL_HINT = "pip install 'avatargen[eval]'"
CHIP_SIZE = 150  # the ResNet's input side
CHIP_PADDING = 0.25  # dlib's default margin around the aligned face (what the ResNet was trained with)
_FIRST_PASS_THRESHOLD = 0.0  # HOG score needed at the image's own scale
_SECOND_PASS_THRESHOLD = -0.3  # ... and, when that finds nothing, at 2x upsampling (stylised and small faces)
# Near the face of the previous frame a weaker match is still that face (a low threshold over the whole image finds
# faces in coffee cups; confined to where a face just was, it follows a stylised face the detector is unsure of).
_NEAR_THRESHOLD = -0.9
_NEAR_MARGIN = 0.5  # the search window: the previous box grown by this fraction of its size on each side
# Larger images are searched at this longest side (the landmarks still come from the full image): the HOG search
# costs in proportion to the pixels (0.9 s per pass on a 4000x4000 photo), and a reference's face is far larger
# than the 40-80 px the two passes need. Video frames (`output.max_side` 1280 by default) are searched as they are.
_SEARCH_SIDE = 1280
_SHAPE_MODEL = "shape_predictor_5_face_landmarks.dat"
_RESNET_MODEL = "dlib_face_recognition_resnet_model_v1.dat"


_SHARED: FaceDetector | None = None


class FaceExtraMissing(BadInputError):
    """The face networks (``avatargen[eval]``) are not installed. Exit code 2; the message says how to install."""


@dataclass(frozen=True)
class Face:
    """A detected face: ``box`` (left, top, right, bottom) in pixels, ``points`` the five landmarks (5, 2) as
    (x, y) pixels in dlib's order (two corners of the eye on the image's right, two of the other eye, the base of
    the nose), ``score`` the HOG detector's margin (above 0: confident)."""

    box: tuple[int, int, int, int]
    points: np.ndarray  # (5, 2) float64, (x, y)
    score: float

    @property
    def width(self) -> int:
        return self.box[2] - self.box[0]

    @property
    def centre(self) -> tuple[float, float]:
        return (self.box[0] + self.box[2]) / 2.0, (self.box[1] + self.box[3]) / 2.0

    @property
    def spread(self) -> float:
        """The root-mean-square distance of the five landmarks from their mean, in pixels: the face's size as the
        chip's alignment sees it (the detector's box widths come in coarse steps of its scale pyramid)."""
        return float(np.sqrt(((self.points - self.points.mean(axis=0)) ** 2).sum(axis=1).mean()))


def shared_detector() -> FaceDetector:
    """One ``FaceDetector`` per process (loading its networks on its first search takes ~0.1 s, ~0.4 s when the HOG
    detector is not in the cache folder yet: ``avatargen.face.hog_cache``)."""
    global _SHARED
    if _SHARED is None:
        _SHARED = FaceDetector()
    return _SHARED


def _search_image(rgb: np.ndarray) -> tuple[np.ndarray, float]:
    """The image the HOG search runs on and its scale to ``rgb``: ``rgb`` itself up to ``_SEARCH_SIDE``, else a
    box-filtered copy with that longest side."""
    height, width = rgb.shape[:2]
    scale = min(1.0, _SEARCH_SIDE / max(height, width))
    if scale == 1.0:
        return rgb, 1.0
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    return np.asarray(Image.fromarray(rgb).resize(size, Image.Resampling.BOX)), scale


def face_networks_problem() -> str | None:
    """Why the face networks (the ``avatargen[eval]`` extra) cannot be used here, in one line; None when they can:
    ``dlib`` imports (a broken or shadowed install fails here, not in the middle of a render) and
    ``face_recognition_models`` holds its model files."""
    try:
        import dlib  # noqa: F401
    except (ImportError, OSError) as error:  # not installed, or a build that does not load on this machine
        return f"dlib does not import ({error.__class__.__name__}: {error})"
    try:
        face_model_folder()
    except FaceExtraMissing as error:
        return str(error)
    return None


def face_networks_installed() -> bool:
    """True when the face networks (the ``avatargen[eval]`` extra) are installed and load: ``face_networks_problem``."""
    return face_networks_problem() is None


class FaceDetector:
    """dlib's frontal-face HOG detector with 5-point landmarks, loaded on the first search (~0.1 s: a render of a
    picture searched before needs neither, ``avatargen.face.picture_cache``); the ResNet on the first ``embedding``.
    dlib itself is imported on first use too (~30 ms of a render's first frame).

    Raises ``FaceExtraMissing`` at construction when the extra is not installed, on first use when dlib is there but
    does not import (``face_networks_problem``).
    """

    def __init__(self) -> None:
        if importlib.util.find_spec("dlib") is None:
            raise FaceExtraMissing(f"face analysis needs the face networks: {INSTALL_HINT}")
        self._models = face_model_folder()
        self._search_networks: tuple[Any, Any] | None = None
        self._resnet = None

    @functools.cached_property
    def _dlib(self) -> Any:
        problem = face_networks_problem()
        if problem is not None:
            raise FaceExtraMissing(f"face analysis needs the face networks ({problem}): {INSTALL_HINT}")
        import dlib

        return dlib

    @property
    def _hog(self) -> Any:
        return self._networks()[0]

    @property
    def _shape(self) -> Any:
        return self._networks()[1]

    def _networks(self) -> tuple[Any, Any]:
        """The HOG detector (from the cache folder: dlib's own build takes ~0.3 s) and the shape predictor."""
        if self._search_networks is None:
            hog = frontal_face_detector(self._dlib)
            self._search_networks = hog, self._dlib.shape_predictor(str(self._models / _SHAPE_MODEL))
        return self._search_networks

    def find(self, rgb: np.ndarray, near: Face | None = None, follow: bool = False) -> Face | None:
        """The most confident face of an (H, W, 3) uint8 RGB image, or None when there is none.

        ``near``: the face found in the previous video frame; when the whole-image search finds nothing, a weaker
        match around it is accepted (see ``_NEAR_THRESHOLD``); ``follow``: of several faces, the one nearest to
        ``near`` rather than the most confident (a video's chosen face followed).
        """
        rgb = np.ascontiguousarray(rgb)
        rects, scores = self._search(rgb)
        offset = (0, 0)
        if not rects and near is not None:
            x0, y0, x1, y1 = near.box
            grow = _NEAR_MARGIN * max(x1 - x0, y1 - y0)
            height, width = rgb.shape[:2]
            left, top = max(0, int(x0 - grow)), max(0, int(y0 - grow))
            right, bottom = min(width, int(x1 + grow)), min(height, int(y1 + grow))
            if right - left >= 40 and bottom - top >= 40:
                window = np.ascontiguousarray(rgb[top:bottom, left:right])
                rects, scores, _ = self._hog.run(window, 1, _NEAR_THRESHOLD)
                offset = (left, top)
        if not rects:
            return None
        best = int(np.argmax(scores))
        if follow and near is not None and len(rects) > 1:
            cx, cy = near.centre
            best = int(np.argmin([(r.left() + r.right() + 2 * offset[0] - 2 * cx) ** 2
                                  + (r.top() + r.bottom() + 2 * offset[1] - 2 * cy) ** 2 for r in rects]))  # fmt: skip
        return self._face(rgb, rects[best], float(scores[best]), offset)

    def find_all(self, rgb: np.ndarray) -> list[Face]:
        """Every face of an (H, W, 3) uint8 RGB image, left to right (by box centre); the same search as ``find``."""
        rgb = np.ascontiguousarray(rgb)
        rects, scores = self._search(rgb)
        faces = [self._face(rgb, rect, float(score)) for rect, score in zip(rects, scores)]
        return sorted(faces, key=lambda face: face.centre[0])

    def _search(self, rgb: np.ndarray) -> tuple[list, list[float]]:
        """dlib rectangles (in ``rgb``'s pixels) and scores of the faces the two HOG passes find in ``rgb``."""
        search, scale = _search_image(rgb)
        rects, scores, _ = self._hog.run(search, 0, _FIRST_PASS_THRESHOLD)
        if not rects:
            rects, scores, _ = self._hog.run(search, 1, _SECOND_PASS_THRESHOLD)
        if scale != 1.0:
            rects = [self._dlib.rectangle(*(int(round(v / scale)) for v in (r.left(), r.top(), r.right(), r.bottom())))
                     for r in rects]  # fmt: skip
        return list(rects), list(scores)

    def _face(self, rgb: np.ndarray, r, score: float, offset: tuple[int, int] = (0, 0)) -> Face:
        """The ``Face`` of dlib rectangle ``r`` found at ``offset`` (x, y) in ``rgb``: its five landmarks."""
        rect = self._dlib.rectangle(r.left() + offset[0], r.top() + offset[1], r.right() + offset[0], r.bottom() + offset[1])
        shape = self._shape(rgb, rect)
        points = np.array([(p.x, p.y) for p in shape.parts()], dtype=np.float64)  # (5, 2)
        return Face((rect.left(), rect.top(), rect.right(), rect.bottom()), points, score)

    def boxes(self, rgb: np.ndarray) -> list[tuple[int, int, int, int]]:
        """Every face of an (H, W, 3) uint8 RGB image as (left, top, right, bottom), most confident first."""
        search, scale = _search_image(np.ascontiguousarray(rgb))
        rects, scores, _ = self._hog.run(search, 1, _FIRST_PASS_THRESHOLD)
        order = np.argsort(scores)[::-1]
        return [tuple(int(round(v / scale)) for v in (rects[i].left(), rects[i].top(), rects[i].right(), rects[i].bottom()))
                for i in order]  # fmt: skip

    def chip(self, rgb: np.ndarray, face: Face, size: int = CHIP_SIZE) -> np.ndarray:
        """The face rotated, scaled and cropped by its five points as the ResNet sees it -> (size, size, 3) uint8."""
        return np.asarray(self._dlib.get_face_chip(np.ascontiguousarray(rgb), self._shape_of(face), size, CHIP_PADDING))

    def embedding(self, rgb: np.ndarray, face: Face) -> np.ndarray:
        """The face's 128-d ResNet descriptor (float64); distances below ``SAME_PERSON_DISTANCE``: same person."""
        if self._resnet is None:
            self._resnet = self._dlib.face_recognition_model_v1(str(self._models / _RESNET_MODEL))
        chip = self.chip(rgb, face)
        return np.asarray(self._resnet.compute_face_descriptor(chip), dtype=np.float64)  # (128,)

    def _shape_of(self, face: Face):
        rect = self._dlib.rectangle(*face.box)
        parts = [self._dlib.point(int(round(x)), int(round(y))) for x, y in face.points]
        return self._dlib.full_object_detection(rect, parts)


def face_model_folder() -> Path:
    """Where ``face_recognition_models`` keeps its ``.dat`` files, found without importing the package (its
    ``__init__`` needs ``pkg_resources``, which recent setuptools no longer ships). Raises ``FaceExtraMissing``."""
    spec = importlib.util.find_spec("face_recognition_models")
    if spec is None or not spec.submodule_search_locations:
        raise FaceExtraMissing(f"face_recognition_models is not installed: {INSTALL_HINT}")
    folder = Path(next(iter(spec.submodule_search_locations))) / "models"
    if not (folder / _SHAPE_MODEL).is_file():
        raise FaceExtraMissing(f"face_recognition_models has no {_SHAPE_MODEL} in {folder}: reinstall with {INSTALL_HINT}")
    return folder
