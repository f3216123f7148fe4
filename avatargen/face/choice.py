"""Which face of a reference picture is animated, and which way up the picture is.

``choose_face`` finds every face (``FaceDetector.find_all``). Several: the largest is animated unless the user names
one (``--face N``, counted left to right), and one line says which. The face's layout is then checked against
MediaPipe's face mesh, which finds a face turned any way: a picture on its side or upside down (a camera that saved
no orientation tag) is turned upright, with one line. A picture where the detector finds no face at all is also
searched turned by each quarter turn. A face that the mesh says lies on its side, in a picture where no upright face
is found when turned, is not animated as a face (one line; the caller centre-crops as for no face). What the
detector and the mesh find in a picture is kept per machine (``avatargen.face.picture_cache``): a picture seen before
is framed without loading either. A face cut off by the picture's edge (``cut_edge``) is refused (exit 2, one line).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import numpy as np

from avatargen.errors import BadInputError
from avatargen.face.detector import Face, FaceDetector
from avatargen.face.lips import LipFinder, LipSearch, lips_in_mesh, lips_installed, quarter_turns
from avatargen.face.picture_cache import KnownPicture

CUT_SHARE = 0.25  # a face's box past the picture's edge by more than this share of its width: the face is cut off
SURE_FACE_SCORE = 0.5  # HOG margin of a clear face; with no face mesh to check them, weaker ones beside it are not counted
TURN_NAMES = {1: "a quarter turn clockwise", 2: "upside down", 3: "a quarter turn counter-clockwise"}

_FINDER: LipFinder | None = None


def shared_lip_finder() -> LipFinder:
    """One ``LipFinder`` per process (building its graph takes ~0.1 s idle)."""
    global _FINDER
    if _FINDER is None:
        _FINDER = LipFinder()
    return _FINDER


class Chosen(NamedTuple):
    """The ``picture`` (H, W, 3) uint8, upright, the ``face`` animated in it (None: none), and the quarter ``turns``
    (``np.rot90``'s k) that stood the given picture upright (0: none)."""

    picture: np.ndarray
    face: Face | None
    turns: int = 0


def choose_face(rgb: np.ndarray, detector: FaceDetector, warn: Callable[[str], None], name: str,
                number: int | None = None, known: KnownPicture | None = None) -> Chosen:  # fmt: skip
    """The face of ``rgb`` (H, W, 3) uint8 to animate, and the picture turned upright where it was not (one line to
    ``warn``); ``number``: the face to take, 1-based, left to right (None: the largest); ``known``: ``rgb``'s
    ``KnownPicture`` when the caller has it. Raises ``BadInputError`` for a ``number`` the picture has no face for."""
    known = known or KnownPicture(rgb)
    faces = known.faces(partial(detector.find_all, rgb))
    turns = 0
    if not faces:
        for turns in (1, 3, 2):  # a portrait saved on its side is likelier than one upside down
            faces = faces_turned(rgb, turns, detector)
            if faces:
                break
        else:
            turns = 0
    meshes: list[np.ndarray | None] = [None] * len(faces)
    if turns == 0 and faces and lips_installed():
        meshes = [known.mesh(face, partial(_mesh, rgb, face)) for face in faces]
        if any(mesh is not None for mesh in meshes):  # a "face" no face mesh fits is the detector's mistake
            faces, meshes = map(list, zip(*[(f, m) for f, m in zip(faces, meshes) if m is not None]))
    elif len(faces) > 1:  # no face mesh to check them: a weak match beside clear faces is the detector's mistake
        faces = [face for face in faces if face.score >= SURE_FACE_SCORE] or [max(faces, key=lambda f: f.score)]
        meshes = [None] * len(faces)
    if not faces:
        if number is not None:
            raise BadInputError(f"--face {number}: no face found in {name}; give a picture with a face, or leave out --face")
        return Chosen(rgb, None)
    index = _pick(faces, warn, name, number)
    face, mesh = faces[index], meshes[index]
    if mesh is not None and quarter_turns(mesh):
        turns = quarter_turns(mesh)
        upright = faces_turned(rgb, turns, detector)
        if not upright:
            warn(f"warning: the face found in {name} lies {TURN_NAMES[turns]} and no upright face was found when "
                 "turning the picture: not animated as a face (turn the picture upright)")  # fmt: skip
            return Chosen(rgb, None)
        face = upright[_pick(upright, lambda line: None, name, number)]
    if turns:
        warn(f"warning: {name} lies {TURN_NAMES[turns]} (no orientation tag says so): animated it turned upright; "
             "save it upright to silence this")  # fmt: skip
        rgb = np.ascontiguousarray(np.rot90(rgb, turns))
    edge = cut_edge(face, rgb.shape[0], rgb.shape[1])
    if edge is not None:
        raise BadInputError(f"the face in {name} is cut by the picture's {edge} edge: a face that is not all in the "
                            "picture cannot be animated; give a picture with the whole face in it")  # fmt: skip
    return Chosen(rgb, face, turns)


def cut_edge(face: Face, height: int, width: int) -> str | None:
    """The picture edge (``left``, ``right``, ``top``, ``bottom``) that cuts ``face`` off: one of its five landmarks
    outside the picture, or its box past the edge by more than ``CUT_SHARE`` of its width; None: the face is in."""
    (x0, y0, x1, y1), reach = face.box, CUT_SHARE * face.width
    xs, ys = face.points[:, 0], face.points[:, 1]
    for edge, cut in (("left", xs.min() < 0 or x0 < -reach), ("right", xs.max() > width - 1 or x1 > width + reach),
                      ("top", ys.min() < 0 or y0 < -reach), ("bottom", ys.max() > height - 1 or y1 > height + reach)):
        if cut:
            return edge
    return None


def faces_turned(rgb: np.ndarray, turns: int, detector: FaceDetector) -> list[Face]:
    """``detector.find_all`` of ``rgb`` turned by ``turns`` quarter turns counter-clockwise (``np.rot90``)."""
    turned = np.ascontiguousarray(np.rot90(rgb, turns))
    return KnownPicture(turned).faces(partial(detector.find_all, turned))


def _mesh(rgb: np.ndarray, face: Face) -> np.ndarray | None:
    return shared_lip_finder().mesh(rgb, face)


def _pick(faces: list[Face], warn: Callable[[str], None], name: str, number: int | None) -> int:
    """The index of face ``number`` (1-based) of ``faces`` (left to right), or of the largest; one line when there
    are several."""
    if number is not None and not 1 <= number <= len(faces):
        raise BadInputError(f"--face {number}: {name} has {len(faces)} face{'s' * (len(faces) != 1)} (numbered left "
                            f"to right); give --face 1{f'-{len(faces)}' if len(faces) > 1 else ''}")  # fmt: skip
    index = number - 1 if number is not None else int(np.argmax([face.width for face in faces]))
    if len(faces) > 1:
        how = "as asked" if number is not None else "the largest"
        warn(f"note: {name} has {len(faces)} faces; animating face {index + 1} (numbered left to right, {how}); "
             "--face N picks another")  # fmt: skip
    return index


def reference_lips(picture: np.ndarray, face: Face | None, alpha: np.ndarray | None = None) -> LipSearch | None:
    """The lips of ``face`` in ``picture`` (H, W, 3) uint8 (``LipFinder.find``, its face mesh kept per machine:
    ``KnownPicture``); None where there is no face or no lip finder installed. ``alpha``: the picture's opacity
    (H, W) uint8 where it was composited over white (``Reference.alpha``; None: opaque)."""
    if face is None or not lips_installed():
        return None
    return lips_in_mesh(picture, face, KnownPicture(picture).mesh(face, partial(_mesh, picture, face)), alpha)
