"""What every metric of one evaluation shares: the video and its audio (``EvalContext``), the reference image's face
(``ReferenceFace``), and each analysed frame with its grey reductions (``Frame``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from avatargen.eval.sync import frame_rms
from avatargen.eval.video import VideoInfo
from avatargen.face.detector import Face, FaceDetector
from avatargen.io.image import Reference
from avatargen.numeric import LUMA

_GRAY = np.array(LUMA, np.float32)


def coarse_gray(frame: np.ndarray, side: int) -> np.ndarray:
    """(H, W, 3) uint8 -> (side, side) float32 gray, area-averaged (H and W cropped to multiples of ``side``)."""
    height, width = frame.shape[:2]
    cell_h, cell_w = max(1, height // side), max(1, width // side)
    gray = frame[: cell_h * side, : cell_w * side].astype(np.float32) @ _GRAY
    return gray.reshape(side, cell_h, side, cell_w).mean(axis=(1, 3))


@dataclass(frozen=True)
class Frame:
    """One analysed frame: its ``index`` in the video (from 0), its time ``time_s`` and its ``pixels`` (H, W, 3)
    uint8 RGB, at most ``video.MAX_ANALYSIS_SIDE`` on the long side."""

    index: int
    time_s: float
    pixels: np.ndarray
    _grays: dict[int, np.ndarray] = field(default_factory=dict, repr=False, compare=False)

    def gray(self, side: int) -> np.ndarray:
        """(side, side) float32 gray levels, area averages (``coarse_gray``); computed once for all the metrics that
        ask for this side."""
        if side not in self._grays:
            self._grays[side] = coarse_gray(self.pixels, side)
        return self._grays[side]


def scaled_face(face: Face, scale: float, offset: tuple[float, float]) -> Face:
    """``face`` in pixels scaled by ``scale``, then moved by ``offset`` (x, y)."""
    x, y = offset
    box = face.box
    moved = (box[0] * scale + x, box[1] * scale + y, box[2] * scale + x, box[3] * scale + y)
    return Face(tuple(int(round(v)) for v in moved), face.points * scale + np.asarray(offset), face.score)


@dataclass(frozen=True)
class ReferenceFace:
    """The face of the reference image: ``face`` was found in ``loaded.square`` (the picture padded to a square) at
    ``side`` px; ``embedding`` is its (128,) identity descriptor."""

    loaded: Reference
    side: int
    face: Face
    embedding: np.ndarray

    def in_picture(self) -> Face:
        """``face`` in the pixels of the picture as it was given (``loaded.picture``)."""
        left, top, square_side = self.loaded.crop
        return scaled_face(self.face, square_side / self.side, (left, top))


@dataclass(frozen=True)
class EvalContext:
    """What every metric of one evaluation of ``video`` shares.

    ``fps``: the rate the frames are timed at; ``info``: the stream's size and rate as stored; ``detector``: the face
    networks; ``reference_image``: the image given to compare with (None: the video's first face stands in), and
    ``reference`` its face (None: none given, or none found in it); ``seams``: frame indices where avatargen's
    chunks meet (None: not told). ``note`` adds a line to the result's ``notes``."""

    video: Path
    info: VideoInfo
    fps: float
    detector: FaceDetector
    audio: np.ndarray = field(repr=False)  # (S,) float32 mono
    sample_rate: int
    reference_image: Path | None = None
    reference: ReferenceFace | None = None
    seams: tuple[int, ...] | None = None
    notes: list[str] = field(default_factory=list)
    _loudness: dict[int, np.ndarray] = field(default_factory=dict, repr=False, compare=False)

    def note(self, line: str) -> None:
        """Say in the result's ``notes`` what was measured with doubt or not at all."""
        self.notes.append(line)

    def loudness(self, frames: int) -> np.ndarray:
        """(frames,) RMS of the audio around each frame (``sync.frame_rms``; 0 past the audio's end)."""
        if frames not in self._loudness:
            self._loudness[frames] = frame_rms(self.audio, self.sample_rate, self.fps, frames)
        return self._loudness[frames]
