"""How the mouth of a warped render gets into the reference: ``mouth_for`` picks the lips the warp moves: the face
mesh's; where the mesh fits another face than the detector's, the lips placed from the detector's five landmarks; a
face whose mouth cannot be found (no mesh fits it: covered, masked; turned too far; lips that do not show) is
refused, never rendered frozen."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from avatargen.compose.composite import ReferenceCompositor
from avatargen.compose.layout import FaceLayout
from avatargen.compose.mouth_close import close_mouth
from avatargen.compose.mouth_warp import (SHUT_OPENING_MAX, ModelMapping, MouthCue, MouthWarp, estimated_lips,
                                          still_opening)
from avatargen.errors import BadInputError
from avatargen.face.lips import OTHER_FACE, LipSearch


def mouth_for(compositor: ReferenceCompositor, layout: FaceLayout, search: LipSearch | None, photo: bool, auto: bool,
              still: np.ndarray, warn: Callable[[str], None], speech: bool = False) -> MouthWarp | None:  # fmt: skip
    """The warp of the reference's own lips (``search``: what the lip finder said of the reference's face; None
    where there is no finder or no face, and the lips are estimated from ``layout``, the five landmarks in output
    pixels). Where the face mesh fits another face than the detector's, the lips are estimated from the landmarks
    too, with one line to ``warn``; where the finder saw no face, the lips hidden or the face turned too far,
    ``BadInputError`` (exit 2, one line).
    ``photo``: the reference is a photograph (``MouthCue.colour``; else a cartoon, ``MouthCue.dark``); ``still``: the
    model's input square.

    ``auto``: None (the blend) for a cartoon whose own mouth the dark cue reads open (``still_opening`` over
    ``SHUT_OPENING_MAX``: a dark beard, or a smile that shows its teeth), where no opening could be told from it (a
    smiling synthetic face warped from its own reading lip-synced at 0.43 against the blend's 0.79 over 20 s),
    unless ``speech`` (the render's audio file) can open it: then it is closed first and warped, its opening to be
    driven by the speech as a photograph's is (``MouthWarp.wants_speech``; the blend kept a grin open in every
    pause). A photograph's warp wants the speech too."""
    cue = MouthCue.colour if photo else MouthCue.dark  # how the model draws an open mouth on each
    open_cartoon = not photo and still_opening(still) > SHUT_OPENING_MAX
    if auto and open_cartoon and not speech:
        return None
    if search is None or search.lips is None:
        lips = estimated_lips(compositor.background, layout)
        if search is not None and search.problem != OTHER_FACE:
            raise BadInputError(f"the mouth of the face cannot be found ({search.problem}): a face whose mouth does "
                                "not show cannot talk; give a picture whose mouth shows, facing the camera")  # fmt: skip
        if search is not None:
            warn(f"note: {search.problem}: the mouth is placed from the face detector's five landmarks")
    else:
        lips = compositor.to_output(search.lips)
    mapping = ModelMapping(*compositor.model_pixel_mapping())
    # A mouth open in the picture (a smile's teeth, a word) is closed first: shut in silence, opened by the speech.
    opened = (compositor.background, lips)
    compositor.background, lips = close_mouth(compositor.background, lips)
    warp = MouthWarp(compositor.background, lips, mapping, cue, still=still, teeth_from=opened)
    warp.wants_speech = photo or (auto and open_cartoon)
    return warp
