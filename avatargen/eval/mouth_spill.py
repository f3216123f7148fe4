"""Mouth spill: how much of what a video darkens against its reference picture lies outside the lips' reach.

A talking mouth darkens pixels (the cavity between parted lips, the shadow under a lowered lip) only near the lips.
Dark pixels painted further away are a mouth drawn in the wrong place (a cavity on the chin, over an eye). Per frame:

1. the reference's lips (``avatargen.face.lips``: outer contour) are moved with the head: the similarity that maps
   the reference's five landmarks onto the frame's;
2. over the lower face (``REGION``, in mouth widths around the lips: from under the eyes, where blinks darken, to
   under the chin), a frame pixel is *darkened* when its grey is ``DARKER_BY`` levels below the reference's darkest
   within ``SLACK_PX`` frame pixels of where the head carries it (the slack absorbs the landmarks' jitter at edges),
   and below the darkest there in the reference unmoved (scaled to the frame: where the head's sway fades out, the
   neck and collar stay where they were);
3. its *spill* is the share of darkened pixels further than ``REACH`` mouth widths outside the outer lip contour;
   a frame with fewer darkened pixels than ``MIN_DARKENED`` of the mouth's area has spill 0 (nothing drawn).

``mouth_spill_frames`` is the share of frames whose spill passes ``SPILL_SHARE``; it needs a reference image
whose lips are found (``MouthSpillMetric``).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from avatargen.eval.context import EvalContext, Frame, ReferenceFace
from avatargen.eval.face_track import TrackedFace
from avatargen.eval.metric import Metric
from avatargen.face.choice import shared_lip_finder
from avatargen.face.detector import INSTALL_HINT, Face
from avatargen.face.lips import Lips, lips_installed
from avatargen.numeric import LUMA

DARKER_BY = 40.0  # grey levels
SLACK_PX = 2  # frame pixels
REACH = 1.0 / 3.0  # mouth widths outside the outer lip contour
REGION = ((-1.5, 1.5), (-0.75, 1.6))  # (along, down) in mouth widths from the corners' midpoint
MIN_DARKENED = 0.01  # of the mouth width squared
SPILL_SHARE = 0.15
_GRAY = np.array(LUMA, dtype=np.float32)


def similarity(source: np.ndarray, target: np.ndarray) -> np.ndarray:
    """(2, 3): the rotation, uniform scale and shift that best map ``source`` (n, 2) points onto ``target`` (n, 2),
    by least squares (Umeyama)."""
    mean_s, mean_t = source.mean(axis=0), target.mean(axis=0)
    s, t = source - mean_s, target - mean_t
    u, sigma, vt = np.linalg.svd(t.T @ s / len(source))
    flip = np.diag([1.0, np.sign(np.linalg.det(u @ vt))])
    rotation = u @ flip @ vt
    scale = float((sigma * np.diag(flip)).sum() / max((s**2).sum() / len(source), 1e-12))
    return np.hstack([scale * rotation, (mean_t - scale * rotation @ mean_s)[:, None]])


class MouthSpill:
    """Per-frame spill of a video whose reference is ``picture`` (H, W, 3) uint8 with ``face`` and ``lips`` found in
    it (its pixels). ``update(frame, face)`` per frame; ``summary()`` the keys docs/eval.md lists."""

    def __init__(self, picture: np.ndarray, face: Face, lips: Lips) -> None:
        width = lips.width
        (a0, a1), (d0, d1) = REGION
        corners = np.asarray([lips.centre + width * (a * lips.along + d * lips.down) for a in (a0, a1) for d in (d0, d1)])
        # Only the region (and a margin for the slack) of the picture is kept; everything below is in its pixels.
        height, width_px = picture.shape[:2]
        (x0, y0), (x1, y1) = np.floor(corners.min(axis=0)) - 16, np.ceil(corners.max(axis=0)) + 17
        x0, y0, x1, y1 = int(max(x0, 0)), int(max(y0, 0)), int(min(x1, width_px)), int(min(y1, height))
        origin = np.array([x0, y0], dtype=np.float64)
        self._grey = picture[y0:y1, x0:x1].astype(np.float32) @ _GRAY  # (h, w)
        self._picture_size = (width_px, height)
        self._origin = origin
        self._points = face.points - origin
        self._lips = lips.moved(1.0, tuple(-origin))
        self._corners = corners - origin
        self._darkest: np.ndarray | None = None  # the reference's grey, min-filtered over the slack
        self._slack = 0
        self.spill: list[float] = []

    def update(self, frame: np.ndarray, face: Face | None) -> None:
        """Measure one (h, w, 3) uint8 frame, whose face the tracker found (None: none; the frame is skipped)."""
        if face is None:
            self.spill.append(math.nan)
            return
        to_frame = similarity(self._points, face.points)  # (2, 3) picture (the kept region's pixels) -> frame
        scale = math.sqrt(abs(np.linalg.det(to_frame[:, :2])))  # frame pixels per picture pixel
        slack = max(1, int(math.ceil(SLACK_PX / max(scale, 1e-6))))
        if self._darkest is None or slack != self._slack:
            self._darkest, self._slack = _min_filter(self._grey, slack), slack
        # The region in the picture, sampled at about one point per frame pixel.
        (x0, y0), (x1, y1) = self._corners.min(axis=0), self._corners.max(axis=0)
        step = 1.0 / max(scale, 1e-6)
        xs, ys = np.arange(x0, x1, step), np.arange(y0, y1, step)
        px, py = np.meshgrid(xs, ys)  # picture pixels
        height, width = self._grey.shape
        inside_picture = (px >= 0) & (px <= width - 1) & (py >= 0) & (py <= height - 1)
        fx = to_frame[0, 0] * px + to_frame[0, 1] * py + to_frame[0, 2]
        fy = to_frame[1, 0] * px + to_frame[1, 1] * py + to_frame[1, 2]
        frame_grey = frame.astype(np.float32) @ _GRAY
        seen = inside_picture & (fx >= 0) & (fx <= frame.shape[1] - 1) & (fy >= 0) & (fy <= frame.shape[0] - 1)
        reference = _bilinear(self._darkest, px[seen], py[seen])
        # Where the head's motion fades out (neck, collar: idle motion leaves the body still) the frame shows the
        # picture unmoved, scaled to the frame: a pixel is darkened only if darker than both.
        (pw, ph), (fw, fh) = self._picture_size, (frame.shape[1], frame.shape[0])
        if abs(pw / ph - fw / fh) < 0.02 * pw / ph:
            sx = (fx[seen] + 0.5) * pw / fw - 0.5 - self._origin[0]
            sy = (fy[seen] + 0.5) * ph / fh - 0.5 - self._origin[1]
            gh, gw = self._grey.shape
            sx, sy = np.clip(sx, 0, gw - 1), np.clip(sy, 0, gh - 1)
            reference = np.minimum(reference, _bilinear(self._darkest, sx, sy))
        darkened = _bilinear(frame_grey, fx[seen], fy[seen]) < reference - DARKER_BY  # (n,)
        count = int(darkened.sum())
        if count < MIN_DARKENED * (self._lips.width * scale) ** 2:
            self.spill.append(0.0)
            return
        outside = self._lips.distance_outside(px[seen][darkened], py[seen][darkened]) > REACH * self._lips.width
        self.spill.append(float(outside.mean()))

    def summary(self) -> dict:
        """``mouth_spill_frames`` (share of measured frames whose spill passes ``SPILL_SHARE``), ``mouth_spill_mean``
        and ``mouth_spill_p95`` (of the per-frame spill), ``mouth_spill_worst_frame``."""
        spill = np.asarray(self.spill, dtype=np.float64)
        measured = spill[np.isfinite(spill)]
        if not len(measured):
            return {"mouth_spill_frames": None, "mouth_spill_mean": None, "mouth_spill_p95": None,
                    "mouth_spill_worst_frame": None}  # fmt: skip
        return {
            "mouth_spill_frames": round(float((measured > SPILL_SHARE).mean()), 4),
            "mouth_spill_mean": round(float(measured.mean()), 4),
            "mouth_spill_p95": round(float(np.percentile(measured, 95)), 4),
            "mouth_spill_worst_frame": int(np.nanargmax(np.where(np.isfinite(spill), spill, -1.0))),
        }


class MouthSpillMetric(Metric):
    """The ``mouth_spill_*`` keys against the reference image (``MouthSpill``); ``mouth_spill_frames`` None where
    there is no reference or its lips are not found (a note says which)."""

    def __init__(self, context: EvalContext) -> None:
        self.spill = _spill_against(context.reference, context.note) if context.reference is not None else None

    def update(self, frame: Frame, face: TrackedFace | None) -> None:
        if self.spill is not None:
            self.spill.update(frame.pixels, None if face is None else face.face)

    def summary(self) -> dict[str, Any]:
        return self.spill.summary() if self.spill is not None else {"mouth_spill_frames": None}


def _spill_against(reference: ReferenceFace, note: Callable[[str], None]) -> MouthSpill | None:
    """The spill measure against the reference image's lips, or None, with a ``note``, where they are not found."""
    if not lips_installed():
        note(f"mouth spill not measured: finding the lips needs MediaPipe's face mesh ({INSTALL_HINT})")
        return None
    picture, face = reference.loaded.picture, reference.in_picture()
    search = shared_lip_finder().find(picture, face)
    if search.lips is None:
        note(f"mouth spill not measured: the reference's lips were not found reliably ({search.problem})")
        return None
    return MouthSpill(picture, face, search.lips)


def _min_filter(grey: np.ndarray, radius: int) -> np.ndarray:
    """(H, W): the darkest of ``grey`` within ``radius`` pixels (a square), edges padded."""
    padded = np.pad(grey, radius, mode="edge")
    out = grey.copy()
    height, width = grey.shape
    for dy in range(2 * radius + 1):
        for dx in range(2 * radius + 1):
            np.minimum(out, padded[dy : dy + height, dx : dx + width], out=out)
    return out


def _bilinear(image: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``image`` (H, W) at points (x, y) inside it, bilinear."""
    height, width = image.shape
    x0 = np.clip(np.floor(x).astype(int), 0, width - 2)
    y0 = np.clip(np.floor(y).astype(int), 0, height - 2)
    fx, fy = x - x0, y - y0
    top = image[y0, x0] * (1 - fx) + image[y0, x0 + 1] * fx
    bottom = image[y0 + 1, x0] * (1 - fx) + image[y0 + 1, x0 + 1] * fx
    return top * (1 - fy) + bottom * fy
