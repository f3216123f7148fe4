"""How the mouth of a warped render gets into the reference: ``mouth_for`` picks the lips the warp moves, or keeps
the still picture's mouth where they cannot be trusted."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from avatargen.compose.composite import ReferenceCompositor
from avatargen.compose.layout import FaceLayout
from avatargen.compose.mouth_close import close_mouth
from avatargen.compose.mouth_warp import (SHUT_OPENING_MAX, ModelMapping, MouthCue, MouthWarp, estimated_lips,
                                          still_opening)
from avatargen.face.lips import LipSearch


class StillMouth:
    """The reference's mouth as it is in the picture (``MouthPaste``): for lips that cannot be found reliably."""

    reads_model = False  # the render runs no model for it

    def paste(self, generated: np.ndarray, frames: np.ndarray, first: int | None = None) -> np.ndarray:
        return frames

    def model_box(self, side: int) -> tuple[int, int, int, int]:
        return MouthWarp.model_box(side)  # a small part of the frame: the decoder need not decode the rest


def mouth_for(compositor: ReferenceCompositor, layout: FaceLayout, search: LipSearch | None, photo: bool, auto: bool,
              still: np.ndarray, warn: Callable[[str], None]) -> MouthWarp | StillMouth | None:  # fmt: skip
    """The warp of the reference's own lips (``search``: what the lip finder said of the reference's face; None
    where there is no finder or no face, and the lips are estimated from ``layout``, the five landmarks in output
    pixels), or, with one line to ``warn``, the still mouth where the finder could not trust the lips it saw.
    ``photo``: the reference is a photograph (``MouthCue.colour``; else a cartoon, ``MouthCue.dark``); ``still``: the
    model's input square.

    ``auto``: None (the blend) for a cartoon whose own mouth the dark cue reads open (``still_opening`` over
    ``SHUT_OPENING_MAX``: a dark beard, or a smile that shows its teeth), where no opening could be told from it (a
    smiling synthetic face warped from its own reading lip-synced at 0.43 against the blend's 0.79 over 20 s)."""
    cue = MouthCue.colour if photo else MouthCue.dark  # how the model draws an open mouth on each
    if auto and not photo and still_opening(still) > SHUT_OPENING_MAX:
        return None
    if search is not None and search.lips is None:
        warn(f"warning: the reference's lips cannot be found reliably ({search.problem}): its mouth stays as in the "
             "picture (give a picture whose mouth shows, facing the camera)")  # fmt: skip
        return StillMouth()
    if search is None:
        lips = estimated_lips(compositor.background, layout)
    else:
        lips = compositor.to_output(search.lips)
    mapping = ModelMapping(*compositor.model_pixel_mapping())
    # A mouth open in the picture (a smile's teeth, a word) is closed first: shut in silence, opened by the speech.
    opened = (compositor.background, lips)
    compositor.background, lips = close_mouth(compositor.background, lips)
    return MouthWarp(compositor.background, lips, mapping, cue, still=still, teeth_from=opened)
