"""Where two speakers are in a picture when their boxes are not given (MultiTalk's routing needs a region each).

The reference's default is each half of the picture, 5 % in from its edges (``face_scale=0.05`` in wan/multitalk.py).
With the face networks installed (the ``eval`` extra) and two faces found, the halves are split half way between the
two largest faces instead of at the picture's centre, so two people off-centre still get a region each; the left one
is the first audio track's.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from avatargen.face.detector import face_networks_installed, shared_detector

MARGIN = 0.05  # the reference's face_scale
Box = tuple[float, float, float, float]


def halves(height: int, width: int, split: int | None = None) -> list[Box]:
    """The reference's two regions (x0, y0, x1, y1): each side of column ``split`` (default the centre), inset by
    ``MARGIN`` of the picture's height and of each side's width, with the reference's rounding at the centre."""
    top, bottom = int(height * MARGIN), int(height * (1 - MARGIN))
    if split is None:
        half = width // 2
        return [(int(half * MARGIN), top, int(half * (1 - MARGIN)), bottom),
                (int(half * MARGIN + half), top, int(half * (1 - MARGIN) + half), bottom)]  # fmt: skip
    right = width - split
    return [(int(split * MARGIN), top, int(split * (1 - MARGIN)), bottom),
            (int(split + right * MARGIN), top, int(split + right * (1 - MARGIN)), bottom)]  # fmt: skip


def speaker_boxes(picture: np.ndarray, warn: Callable[[str], None]) -> list[Box]:
    """Two speakers' regions of ``picture`` (uint8 (H, W, 3)), left speaker first (see the module docstring)."""
    height, width = picture.shape[:2]
    if face_networks_installed():
        faces = shared_detector().boxes(picture)[:2]
        if len(faces) == 2:
            centres = sorted((x0 + x1) / 2 for x0, _, x1, _ in faces)
            return halves(height, width, int(round(sum(centres) / 2)))
        warn(f"note: two speakers: {len(faces)} face(s) found in the picture, not 2; each speaker gets a half of it "
             "(left: the first -a); give --person-box X0,Y0,X1,Y1 for each to place them")  # fmt: skip
    else:
        warn("note: two speakers: each gets a half of the picture (left: the first -a); give --person-box "
             "X0,Y0,X1,Y1 for each, or install the face networks to split between the faces found")  # fmt: skip
    return halves(height, width)
