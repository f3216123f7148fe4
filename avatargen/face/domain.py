"""Is a reference image inside what the bundled model knows? It was trained on flat-shaded cartoon avatars only.

``looks_like_photo``: a cartoon face is a handful of flat fills; a photograph's face is shaded everywhere. In the
face chip (``FaceDetector.chip``), its grey levels stretched to the full range (1st to 99th percentile: a dark,
hazy or low-contrast photo is judged as if well exposed), ``flat_pixel_share`` is the share of pixels whose 3x3
neighbourhood varies by less than ``FLAT_VARIANCE`` (grey levels squared): 0.44-0.80 on training-style avatars and
the bundled examples (the lower end after JPEG at quality 60), 0.00-0.17 on photographs (skimage's astronaut,
matplotlib's Grace Hopper; darkened, in grey, at a third of their contrast: 0.01-0.12). Below
``PHOTO_FLAT_SHARE`` the image is taken for a photograph. (The colours of a grey or dark photo are few: counting
them, as this test did before, took those for drawings.)
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from avatargen.numeric import LUMA

if TYPE_CHECKING:
    from avatargen.face.detector import Face

PHOTO_FLAT_SHARE = 0.3
FLAT_VARIANCE = 2.0


def flat_pixel_share(chip: np.ndarray) -> float:
    """Share of an (S, S, 3) uint8 face chip's pixels in flat fills: grey levels stretched to 0-255 between their
    1st and 99th percentiles, 3x3 neighbourhoods varying by less than ``FLAT_VARIANCE``."""
    return flat_grey_share(chip.astype(np.float64) @ np.array(LUMA))


def flat_grey_share(grey: np.ndarray) -> float:
    """``flat_pixel_share`` of an (S, S) float grey image (no matrix product: it starts no BLAS threads)."""
    low, high = np.percentile(grey, [1, 99])
    grey = np.clip((grey - low) * (255.0 / max(high - low, 1.0)), 0.0, 255.0)
    mean = _box3(grey)
    variance = _box3(grey * grey) - mean * mean  # (S, S)
    return float((variance < FLAT_VARIANCE).mean())


def _box3(image: np.ndarray) -> np.ndarray:
    """The mean of each pixel's 3x3 neighbourhood in ``image`` (S, S), the edges repeated."""
    padded = np.pad(image, 1, mode="edge")
    height, width = image.shape
    return sum(padded[dy : dy + height, dx : dx + width] for dy in range(3) for dx in range(3)) / 9.0


def looks_like_photo(chip: np.ndarray) -> bool:
    """True when the face chip has the continuous shading of a photograph, not the flat fills of a cartoon (dark,
    low-contrast and grey photographs included)."""
    return flat_pixel_share(chip) < PHOTO_FLAT_SHARE


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
