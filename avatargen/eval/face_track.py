"""Per-frame face measurements of a video: where the face is, how open the mouth and eyes are, how sharp it is.

Every frame goes through ``FaceDetector.find`` (see ``avatargen/face/detector.py``), following the previous
frame's face. Regions are read in the face chip: the face rotated and scaled by its five landmarks to 150x150
pixels, the same alignment the identity ResNet uses, so a region is a fixed part of the face whatever the head
pose, scale or framing. In that chip (fractions of its side, measured on real and cartoon faces):

- mouth: ``MOUTH_BOX``; its *opening* is the spread (standard deviation) of gray levels there over the chip's
  median gray: closed lips are one even band, an open mouth adds the dark cavity and bright teeth. On the
  generator's ground truth it follows the true opening with correlation 0.98 (avatars 1 and 3) and 0.54 (avatar 2,
  dark lips on dark skin).
- eyes: ``EYE_BOXES``; openness the same spread (iris, white, lashes vs. a closed lid of skin); and the *eyes'
  dark*: the 10th percentile of gray levels in the middle of the eyes (``EYE_MIDDLES``), as a share of the way
  between the chip's 1st and 99th percentiles: the pupil and iris, which a shut lid covers (it rises by 0.14-0.21
  of that range in a photograph's blink, where the spread of an eye behind glasses, its rims and wrinkles kept,
  drops by 3-8 %). It is read in ``DARK_BANDS``: both eyes' middles together (the least noise: a hazy print's
  rise is faint), and the same a little higher (``EYE_UPPER_MIDDLES``), where the chip puts a turned face's eyes;
  and each eye's middle alone, raised 0, 0.03 and 0.06, where the other eye's band holds a dark that no lid covers
  (the far eye of a face turned behind glasses: the rim's black), which sets the pair's percentile.
- sharpness: variance of the Laplacian of the gray chip (gray levels^2): fine detail, scale-free because every
  face is resampled to the same chip.

The five dlib points carry no mouth or eyelid points (dlib's 68-point model does, but it was trained on data
licensed for non-commercial use only), hence regions read through the landmarks rather than lip landmarks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from avatargen.face.detector import Face, FaceDetector
from avatargen.numeric import LUMA

MOUTH_BOX = (0.30, 0.64, 0.70, 0.86)  # (x0, y0, x1, y1), fractions of the chip
EYE_BOXES = ((0.14, 0.24, 0.44, 0.40), (0.56, 0.24, 0.86, 0.40))
EYE_MIDDLES = ((0.22, 0.28, 0.36, 0.37), (0.64, 0.28, 0.78, 0.37))  # the middle of each eye box: pupil and iris
# ... and the same a little higher: where the chip puts the eyes of a face turned ~30 degrees (its five landmarks
# align it less well), whose shut lid's lash line lies across the middle band
EYE_UPPER_MIDDLES = tuple((x0, y0 - 0.06, x1, y1 - 0.06) for x0, y0, x1, y1 in EYE_MIDDLES)
# Where the eyes' dark is read: each entry a band of boxes whose pixels make one 10th percentile (module docstring).
# Each eye alone at three heights: as the head sways, a turned face's near pupil moves between the two above (at
# those two alone, 8 of the turned Grace Hopper's 9 blinks over 20 s were counted; with the one between, 9).
DARK_BANDS = (EYE_MIDDLES, EYE_UPPER_MIDDLES) + tuple(((x0, y0 - raised, x1, y1 - raised),)
                                                      for raised in (0.0, 0.03, 0.06) for x0, y0, x1, y1 in EYE_MIDDLES)
_GRAY = np.array(LUMA, dtype=np.float32)


@dataclass
class FaceTrack:
    """What ``FaceTracker`` measured, one entry per frame (NaN where no face was found)."""

    detected: list[bool] = field(default_factory=list)
    centre: list[tuple[float, float]] = field(default_factory=list)  # mean of the five points, video pixels
    width: list[float] = field(default_factory=list)  # face box width, video pixels
    spread: list[float] = field(default_factory=list)  # ``Face.spread``, video pixels
    mouth: list[float] = field(default_factory=list)
    eyes: list[float] = field(default_factory=list)
    eye_dark: list[tuple[float, ...]] = field(default_factory=list)  # one per ``DARK_BANDS``
    sharpness: list[float] = field(default_factory=list)
    mouth_box: list[tuple[float, float, float, float]] = field(default_factory=list)  # in video pixels
    embeddings: dict[int, np.ndarray] = field(default_factory=dict)  # frame index -> (128,), every few frames

    def arrays(self) -> dict[str, np.ndarray]:
        """The per-frame lists as arrays: centre (T, 2), eye_dark (T, len(DARK_BANDS)), the rest (T,)."""
        return {"detected": np.asarray(self.detected, bool), "centre": np.asarray(self.centre, float).reshape(-1, 2),
                "width": np.asarray(self.width, float), "spread": np.asarray(self.spread, float),
                "mouth": np.asarray(self.mouth, float), "eyes": np.asarray(self.eyes, float),
                "eye_dark": np.asarray(self.eye_dark, float).reshape(-1, len(DARK_BANDS)),
                "sharpness": np.asarray(self.sharpness, float)}


def chip_measures(chip: np.ndarray) -> tuple[float, float, float, tuple[float, ...]]:
    """(mouth opening, eye openness, sharpness, eyes' dark in each of ``DARK_BANDS``) of one (S, S, 3) uint8 face
    chip (module docstring)."""
    gray = chip.astype(np.float32) @ _GRAY  # (S, S)
    level = float(np.median(gray)) + 1.0
    mouth = float(_region(gray, MOUTH_BOX).std()) / level
    eyes = float(np.mean([_region(gray, box).std() for box in EYE_BOXES])) / level
    laplacian = gray[1:-1, :-2] + gray[1:-1, 2:] + gray[:-2, 1:-1] + gray[2:, 1:-1] - 4.0 * gray[1:-1, 1:-1]
    low, high = np.percentile(gray, [1, 99])  # the chip's range: a hazy, low-contrast face's blink rises as much
    dark = tuple((float(np.percentile(np.concatenate([_region(gray, box).ravel() for box in boxes]), 10)) - low)
                 / max(float(high - low), 1.0) for boxes in DARK_BANDS)
    return mouth, eyes, float(laplacian.var()), dark


@dataclass(frozen=True)
class TrackedFace:
    """What the tracker found in one frame: the ``face`` and what its chip shows (``chip_measures``)."""

    face: Face
    mouth: float
    eyes: float
    sharpness: float
    eye_dark: tuple[float, ...]  # one per ``DARK_BANDS``

    @property
    def mouth_box(self) -> tuple[float, float, float, float]:
        """Roughly where ``MOUTH_BOX`` lies in the frame, in its pixels (x0, y0, x1, y1)."""
        return _mouth_box_in_frame(self.face)


class FaceTracker:
    """Follows the face from frame to frame: ``measure`` finds and measures it; ``update`` also keeps what it found
    (``track``), with an embedding every ``embed_every`` frames (None: none)."""

    def __init__(self, detector: FaceDetector, embed_every: int | None = None, number: int | None = None) -> None:
        self.detector = detector
        self.embed_every = None if embed_every is None else max(1, int(embed_every))
        self.track = FaceTrack()
        self.number = number  # follow face ``number`` (1-based, left to right in the first frame that has it)
        self._previous: Face | None = None

    def measure(self, frame: np.ndarray) -> TrackedFace | None:
        """The face in the next frame ((H, W, 3) uint8) and its chip's measures, or None where none is found."""
        if self.number is not None and self._previous is None:
            faces = self.detector.find_all(frame)
            face = faces[self.number - 1] if len(faces) >= self.number else None
        else:
            face = self.detector.find(frame, near=self._previous, follow=self.number is not None)
        if face is None:
            return None
        self._previous = face
        return TrackedFace(face, *chip_measures(self.detector.chip(frame, face)))

    def update(self, index: int, frame: np.ndarray) -> Face | None:
        """Measure frame ``index`` ((H, W, 3) uint8) and keep it in ``track``; returns the face found, or None."""
        tracked = self.measure(frame)
        t = self.track
        t.detected.append(tracked is not None)
        if tracked is None:
            t.centre.append((np.nan, np.nan))
            for values in (t.width, t.spread, t.mouth, t.eyes, t.sharpness):
                values.append(np.nan)
            t.eye_dark.append((np.nan,) * len(DARK_BANDS))
            t.mouth_box.append((np.nan,) * 4)
            return None
        face = tracked.face
        t.centre.append(tuple(face.points.mean(axis=0)))
        t.width.append(float(face.width))
        t.spread.append(face.spread)
        t.mouth.append(tracked.mouth)
        t.eyes.append(tracked.eyes)
        t.eye_dark.append(tracked.eye_dark)
        t.sharpness.append(tracked.sharpness)
        t.mouth_box.append(tracked.mouth_box)
        if self.embed_every is not None and index % self.embed_every == 0:
            t.embeddings[index] = self.detector.embedding(frame, face)
        return face


def _region(gray: np.ndarray, box: tuple[float, float, float, float]) -> np.ndarray:
    size = gray.shape[0]
    x0, y0, x1, y1 = (int(round(f * size)) for f in box)
    return gray[y0:y1, x0:x1]


def _mouth_box_in_frame(face: Face) -> tuple[float, float, float, float]:
    """Roughly where ``MOUTH_BOX`` lies in the frame: below the nose, as wide as the inner eye corners' span."""
    eyes = face.points[:4]
    nose = face.points[4]
    eye_span = float(np.linalg.norm(eyes[0] - eyes[2]))  # outer corner to outer corner
    return (nose[0] - 0.45 * eye_span, nose[1] + 0.05 * eye_span, nose[0] + 0.45 * eye_span, nose[1] + 0.6 * eye_span)

