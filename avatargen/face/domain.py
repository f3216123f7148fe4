"""Is a reference image inside what the bundled model knows? It was trained on flat-shaded cartoon avatars only.

``looks_like_photo``: a cartoon face is a handful of flat colours; a photograph's face is a continuum of shades. In
the face chip (``FaceDetector.chip``), colours are quantised to 16 levels per channel and ``flat_share`` is the
share of pixels covered by the 8 most common colours: 0.83-0.93 on training-style avatars (0.73-0.85 after JPEG at
quality 60), 0.23-0.33 on colour photographs (skimage's astronaut, matplotlib's Grace Hopper). Below
``PHOTO_FLAT_SHARE`` the image is taken for a photograph.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from avatargen.face.detector import Face

PHOTO_FLAT_SHARE = 0.6
MODEL_CARD = "docs/model-card.md"


def flat_share(chip: np.ndarray) -> float:
    """Share of an (S, S, 3) uint8 face chip covered by its 8 most common colours (16 levels per channel)."""
    levels = chip.astype(np.int32) // 16
    codes = (levels[..., 0] * 256 + levels[..., 1] * 16 + levels[..., 2]).ravel()
    counts = np.sort(np.bincount(codes))[::-1]
    return float(counts[:8].sum() / codes.size)


def looks_like_photo(chip: np.ndarray) -> bool:
    """True when the face chip has the continuous shading of a photograph, not the flat fills of a cartoon."""
    return flat_share(chip) < PHOTO_FLAT_SHARE


def photo_warning(name: str, composited: bool = False, warped: bool = False) -> str:
    """The one line printed when the bundled model is given a photograph (``composited``: under reference
    compositing, where only the mouth and jaw are generated; ``warped``: with ``pipeline.mouth=warp``, where the
    photo's own lips move and only the mouth's interior is generated)."""
    if warped:
        expect = ("the photo's own lips and jaw move with the speech and only the mouth's interior is generated, "
                  "as a shaded cavity")  # fmt: skip
    elif composited:
        expect = "the photo stays as it is but for the mouth and jaw, which are drawn in the soft cartoon style it learnt"
    else:
        expect = "expect a soft cartoon-like face in the photo's colours and layout with a moving mouth, not the person"
    return (f"warning: {name} looks like a photograph; the bundled model (model=tiny) knows only cartoon avatars: "
            f"{expect} ({MODEL_CARD}, Limits; train on your own data for photos)")  # fmt: skip


def warn_if_out_of_domain(square: np.ndarray, name: str, warn, composited: bool = False, warped: bool = False,
                          photo: bool | None = None) -> None:  # fmt: skip
    """One line to ``warn`` when the framed reference ``square`` (S, S, 3) is a photograph (nothing when the face
    networks are not installed: framing already said so); ``composited`` and ``warped`` as in ``photo_warning``;
    ``photo``: ``square_is_photo(square)`` when the caller has it already (None: asked here)."""
    if square_is_photo(square) if photo is None else photo:
        warn(photo_warning(name, composited, warped))


def square_is_photo(square: np.ndarray, face: Face | None = None) -> bool:
    """True when the framed reference ``square`` (S, S, 3) shows a face that looks like a photograph (False: a
    cartoon, no face found, or no face networks installed). ``face``: the face already found in ``square`` itself
    (``Reference.square_face``), which saves the search; None: searched for here."""
    from avatargen.face.detector import face_networks_installed, shared_detector
    from avatargen.face.picture_cache import KnownPicture

    known = KnownPicture(square)
    if face is None:  # the most confident face, as ``detector.find`` gives it, kept per machine
        if not known.searched and not face_networks_installed():
            return False
        face = max(known.faces(partial(shared_detector().find_all, square)), key=lambda found: found.score,
                   default=None)  # fmt: skip
        if face is None:
            return False
    # kept per machine too: a picture seen before is judged without importing dlib (~30 ms of the first frame)
    return known.photo(face, lambda: face_networks_installed() and looks_like_photo(shared_detector().chip(square, face)))
