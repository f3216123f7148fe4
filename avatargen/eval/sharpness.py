"""Sharpness of the face relative to the reference: detail a viewer sees in the face, not in the background.

Measure: the variance of the 4-neighbour Laplacian of the gray face chip (the face aligned by its five landmarks
and resampled to 150x150, ``face_track.chip_measures``), so faces of any size in any frame are compared at the same
scale. ``sharpness`` is the median over frames with a face divided by the reference image's: 1 = as detailed as the
reference, 0.2 = a fifth of its fine detail (blurred, smeared or over-compressed).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from PIL import Image

from avatargen.eval.context import EvalContext, Frame, ReferenceFace, scaled_face
from avatargen.eval.face_track import TrackedFace, chip_measures
from avatargen.eval.metric import Metric, Rows
from avatargen.face.detector import FaceDetector

_SAME_SCALE = 1.1  # a video's face within this factor of the reference's size is compared with the reference unscaled


def measure_sharpness(per_frame: np.ndarray, reference: float | None) -> dict:
    """``per_frame``: (T,) Laplacian variance, NaN where no face; ``reference``: the reference chip's, or None."""
    found = per_frame[np.isfinite(per_frame)]
    if len(found) == 0:
        return {"sharpness": None, "sharpness_video": None, "sharpness_reference": reference}
    video = float(np.median(found))
    ratio = round(video / reference, 4) if reference else None
    return {"sharpness": ratio, "sharpness_video": round(video, 2),
            "sharpness_reference": round(reference, 2) if reference else None}  # fmt: skip


def reference_sharpness_at(detector: FaceDetector, reference: ReferenceFace, spread: float) -> float:
    """The Laplacian variance of the reference's face chip with the face at the video's size: ``spread`` is the
    video's median ``Face.spread``.

    The chip resamples every face to 150 px, but how much detail it keeps depends on the pixels it came from: a
    256-px face upscaled to 512 px first gives a chip ~1.5x as detailed as the same face shown at 256 px. So the
    chip is taken from the picture as it was given, unscaled, when the video shows the face within 10 % of that
    size (a video that is the picture itself then scores 1; resampling it by a few per cent would blur it as much as
    the motion being measured), else from the picture scaled to the video's size."""
    face = reference.in_picture()
    picture = reference.loaded.picture
    ratio = spread / face.spread
    if abs(math.log(ratio)) > math.log(_SAME_SCALE):
        height, width = picture.shape[:2]
        size = (max(1, round(width * ratio)), max(1, round(height * ratio)))
        picture = np.asarray(Image.fromarray(picture).resize(size, Image.Resampling.LANCZOS))
        face = scaled_face(face, size[0] / width, (0.0, 0.0))
    # The landmarks as the detector places them at this scale, as in the video's frames (the chip's scale follows
    # them); the face mapped from the search is kept where the detector finds another one or none.
    found = detector.find(picture, near=face)
    if found is not None and np.abs(found.points - face.points).max() <= 0.1 * face.width:
        face = found
    return chip_measures(detector.chip(picture, face))[2]


class Sharpness(Metric):
    """``sharpness`` (``sharpness_video``, ``sharpness_reference``): the face's detail against the reference's."""

    def __init__(self, context: EvalContext) -> None:
        self.context = context
        self.per_frame: list[float] = []  # Laplacian variance of the chip, NaN without a face
        self.spreads: list[float] = []  # ``Face.spread``, NaN without a face

    def update(self, frame: Frame, face: TrackedFace | None) -> None:
        self.per_frame.append(np.nan if face is None else face.sharpness)
        self.spreads.append(np.nan if face is None else face.face.spread)

    def summary(self) -> dict[str, Any]:
        reference = self.context.reference
        spreads = np.asarray(self.spreads, float)
        at_size = None
        if reference is not None and np.isfinite(spreads).any():
            at_size = reference_sharpness_at(self.context.detector, reference, float(np.nanmedian(spreads)))
        return measure_sharpness(np.asarray(self.per_frame, float), at_size)

    @staticmethod
    def rows(result: dict[str, Any]) -> Rows:
        if result.get("sharpness") is None:
            return []
        return [("sharpness", f"{result['sharpness']:.2f} of the reference's face detail (Laplacian variance)")]
