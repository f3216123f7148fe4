"""What a render request gives a family beyond the reference picture and the prompt (``RenderInputs``), for the
families that read it: a source video to follow (dubbing), several audio tracks (speakers) and the regions of the
picture they belong to, each track's statistics when the whole track is known before the render (a file). A family
that reads none of it ignores it; the render session refuses what a family cannot take (``FamilyEngine.follows_video``,
``FamilyEngine.speakers``) before anything is built.

With several tracks the audio blocks the engine reads are (n, tracks) arrays, and ``AudioTimeline.samples`` returns
(n, tracks); with one track they stay 1-D.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np

from avatargen.io.audio_stats import TrackStats

Box = tuple[float, float, float, float]  # (x0, y0, x1, y1) in pixels, x to the right, y down


class FrameSource(Protocol):
    """A source video's frames at the render's frame rate, already framed as the reference was (uint8 (H, W, 3)).

    Read in timeline order, one frame in memory: ``frame(i)`` for a nondecreasing ``i`` (an earlier one restarts the
    decoder); past the source's end, its last frame."""

    def frame(self, index: int) -> np.ndarray: ...

    def close(self) -> None:
        """Stop its decoder (the render session calls it at the end of a render)."""
        ...


@dataclass(frozen=True)
class RenderInputs:
    """The optional inputs of one render (see the module docstring). The default is an image and one track."""

    video: FrameSource | None = None  # follow this source video (dubbing): its frames, framed as the reference
    tracks: int = 1  # audio tracks, one per speaker
    # each whole track's statistics, summed over the files on the first call (a decode pass); None: a stream
    track_stats: Callable[[], tuple[TrackStats, ...]] | None = None
    regions: tuple[Box, ...] | None = None  # each track's speaker in the framed reference's pixels; None: not given


class Framing(Protocol):
    """How pictures of one size become the model's frames: the reference, a source video's frames (the same framing
    as its first), the speakers' boxes. A family that frames pictures itself returns one (``FamilyEngine.framing``);
    otherwise the square of ``pipeline.image_fit`` is the framing."""

    def picture(self, rgb: np.ndarray) -> np.ndarray:
        """uint8 (H, W, 3) of the framed size -> uint8 (h, w, 3)."""
        ...

    def box(self, box: Box) -> Box:
        """A box in the picture's pixels -> the same region in the framed picture's pixels."""
        ...
