"""Idle motion: the small, continuous sway of a head and the blinks of a person listening or talking, as one warp
of each composited frame (the compositor's ``warp`` hook).

It is procedural and seeded, not learned. Every frame is a pure function of (seed, frame index): the head follows
a few seeded sinusoids per degree of freedom with incommensurate periods of several seconds (so it never repeats
with any chunk length), and blink onsets come from a seeded renewal process with intervals of 0.5-1.5x the mean.
A frame computed alone, out of order, after a resume or in any chunking gives the same pixels.

Head motion: a small translation, a roll about the neck and a slight nod (the inner face moving down against the
outline), applied in full inside an ellipse over the head (hair and ears included) placed from the ``FaceLayout``,
falling smoothly to zero towards the neck, the shoulders and the background, which stay put.

Blinks: per eye, from its two corner landmarks, the strip of skin above the eye is stretched down over it, its lower
edge (the lash line) sliding down to meet the lower lid, which rises a little; the eye between them is covered, not
squashed. On a drawn face the lids close over the eye's opening as drawn (measured on the frame: drawn eyes sit off
the detector's corners and reach past them), the strip starts below whatever is drawn above the eye (a brow, a
crease, a glasses rim: it stays in front), and what the lids cover takes the cheek's colour where it is not skin. On
a photograph the lid slides down with its own texture instead, and what is much darker than the skin above it (a
brow, the rim of a pair of glasses) stays where it is. Both fields are
composed into one map of source pixels (head motion of the eyelid-warped reference) and applied with one bicubic
``cv2.remap`` inside the head's bounding box (bilinear would soften the reference's detail).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from avatargen.compose.idle_settings import IdleMotionSettings
from avatargen.compose.layout import FaceLayout
from avatargen.compose.opencv import cv2
from avatargen.numeric import (
    LUMA,
    SeededUniform,
    column_median,
    nearest_pixels,
    smoothstep,
)

# The head ellipse, in face widths (the detector box's width) from the centre of the eyes, along the eye line (u)
# and down the face (v). Measured on training avatars (hair and ears inside) and skimage's astronaut.
_HEAD_BELOW_EYES = 0.16  # ellipse centre
_HEAD_HALF_WIDTH = 0.62
_HEAD_HALF_HEIGHT = 0.80
_FIELD_CELLS = 96  # the head field is computed on a grid of at least this many cells along the box's shorter side
_RIGID_INSIDE = 0.85  # elliptical radius up to which the head moves as one piece
_STILL_OUTSIDE = 1.20  # ... and from which nothing moves
_PIVOT_BELOW_EYES = 0.95  # the roll turns the head about the neck
# The inner face (eyes, nose, mouth) that a nod moves against the outline.
_INNER_BELOW_EYES = 0.30
_INNER_HALF_WIDTH = 0.42
_INNER_HALF_HEIGHT = 0.55

# Shares of the amplitude per degree of freedom (the amplitude is in pixels per 100 px of face width).
_SWAY_X, _SWAY_Y, _ROLL_AT_EYES, _NOD = 1.0, 0.6, 0.8, 0.5
_SWAY_TERMS = (1.0, 0.6, 0.35)  # relative weights of each degree's three sinusoids
_PERIODS_S = (2.5, 9.0)  # their periods are drawn log-uniformly in this range

# The eye, in eye widths (corner to corner) from the eye centre: s along the eye (unit: _EYE_HALF_SPAN widths),
# t across it (down positive). The lids' heights follow cos(pi s / 2) ** 0.8, the shape of an eye opening.
_EYE_HALF_SPAN = 0.85  # drawn eyes reach a little past the detector's corners
_UPPER_LID = 0.50  # the upper lid's edge above the centre line
_LOWER_LID = 0.34  # the lower lid's edge below it
_SKIN_ABOVE = 0.60  # the skin stretched over the eye starts this far above (below the brow)
_SKIN_BELOW = 0.62  # the lower lid's skin reaches this far below
# A photograph's eye: the lids' edges above and below the centre line (a real eye opens less than a drawn one), the
# sliding lid's band above its edge and the skin above that stretched to follow (below the brow).
_PHOTO_LIDS = (0.20, 0.16)
_LID_BAND, _LID_REACH = 0.16, 0.30
# Above the lid, what is much darker than the skin (a brow, the rim of a pair of glasses: in front of the lid) stays
# where it is: the stretched skin ends _CEILING_GAP below the lowest such pixel, searched in _CEILING_BINS columns
# across the eye, _CEILING_STEP at a time from _CEILING_START above the lid's crease up to the stretch's reach, for
# pixels darker than _DARK of the skin's brightness; the limit is smoothed across _CEILING_SPAN columns (no seams),
# and at least _MIN_STRETCH of skin stays to stretch (a rim sitting on the crease moves a little).
_CEILING_BINS, _CEILING_SPAN, _CEILING_STEP, _CEILING_START, _CEILING_GAP = 24, 5, 0.02, 0.04, 0.06
_DARK, _MIN_STRETCH = 0.7, 0.05
# Skin stretched more than _SMOOTH_FROM times (a thin strip between the lid and a rim or brow held in front) shows
# its texture as a comb of streaks along the stretch: it gives way to its own values averaged across the eye over
# _SMOOTH_SPAN eye widths, in full from _SMOOTH_FULL times (a plain lid fold), fading in over _SMOOTH_EDGE eye widths
# from the stretch's ends (no seam).
_SMOOTH_FROM, _SMOOTH_FULL, _SMOOTH_SPAN, _SMOOTH_EDGE = 1.5, 3.0, 0.12, 0.03
# Long lashes: dark strokes rooted in the lid's band that stand up past it (mascara'd lashes) were taken for a rim in
# front, and the thin strip between them and the sliding band stretched six-fold into a comb of vertical streaks.
# Lashes are found per column: at least _LASH_ROOT of the band's upper half (samples _LASH_WIDE eye widths around)
# darker than _DARK of the skin, and pixels that dark (_LASH_TIP of them) standing up to _LASH_MAX above the band;
# an eye has them where _LASH_RUN columns within _LASH_MIDDLE of its half span (``s``) stand _LASH_MIN high (a brow,
# hair or a rim meets the band at a corner or stands apart). Their columns stretch from _LASH_HEADROOM above the tips
# (or below what is dark there, a crease or a brow), lashes and skin alike (1.5-2x, not averaged): they follow the lid.
_LASH_ROOT, _LASH_TIP, _LASH_WIDE, _LASH_MAX, _LASH_HEADROOM = 0.25, 0.06, 0.12, 0.25, 0.15
_LASH_MIN, _LASH_MIDDLE, _LASH_RUN = 0.18, 0.7, 4
_LASH_THICKNESS, _LASH_DARKNESS = 0.035, 0.3  # the lash line along the shutting lid: eye widths, share of black
# Long lashes turn with the lid (``_hanging_lashes``; a shut lid's lashes point down): over _LASH_TURN of its closure
# those standing over it give way to the skin between them (its mean over boxes of _LASH_SPAN eye widths, with the
# detail of the skin under the eye), fading in over _LASH_EDGE (of its half span from the eye's corners, eye widths
# from their tips); seen end on (half shut) they are a fringe along its edge, _LASH_FRINGE of their length above it
# and _LASH_HANG of that below; shut, they hang below it, _LASH_HANG of their length, fading over _LASH_FADE of it
# towards the tips. A pixel is lash as far as it is darker than _LASH_DARK of the skin's grey (none at the first, all
# at the second): a hanging lash shows its own pixels over the lid, the skin between lashes leaves the lid's.
_LASH_TURN, _LASH_FRINGE, _LASH_HANG, _LASH_FADE = (0.25, 0.6), 0.3, 0.8, 0.3
_LASH_DARK, _LASH_SPAN, _LASH_EDGE = (0.9, 0.7), 0.6, (0.25, 0.1)
_CHEEK_BAND = (0.55, 0.80)  # eye widths below the eye centre: the skin whose colour a lid takes
# Levels (any channel) from it a drawn lid's pixel may differ in full; twice that: the cheek's colour (drawn skin is
# flat, the crease lines stretched over the lid differ from it by 12-60).
_SKIN_TOLERANCE = 3.0
_DRAWN_UNLIKE = 24.0  # levels (any channel) from the cheek at which what is drawn above a drawn eye stays in front
# A drawn eye's opening, measured (drawn eyes sit off the detector's corners and reach past them): what differs from
# the cheek by more than _DRAWN_EYE levels (its outline, white and iris) connected to its middle, sampled every
# _OPENING_STEP eye widths within _OPENING_ALONG of the corners' centre and _OPENING_ACROSS down. Its columns' top and
# bottom, the highest and lowest of _OPENING_SPAN neighbours (an iris too like the skin leaves no notch), are the lids'
# edges, its ends the span they close over. Where it reaches the sampled box's edge (a rim, hair), the lids keep their
# drawn shape (_UPPER_LID, _LOWER_LID).
_DRAWN_EYE, _OPENING_STEP, _OPENING_ALONG, _OPENING_ACROSS, _OPENING_SPAN = 40.0, 0.04, 1.3, (-0.7, 0.6), 5
# The drawn outline along the opening's top (darker than _OUTLINE_DARK of the cheek's grey; per column no thicker than
# its median over the columns nor _OUTLINE_MAX eye widths: an iris under the lid is not outline) slides down with the
# upper lid, its edge: a closing cartoon eye keeps its dark lid line, and a shut one shows it.
_OUTLINE_DARK, _OUTLINE_MAX = 0.5, 0.15
_SKIN_FADE = 0.08  # eye widths over which a lid's own pixels give way to that colour
_MEET = 0.70  # where the lids meet when shut: this fraction of the way from the upper lid to the lower one

_GREY = np.array(LUMA)
_GREY_32 = _GREY.astype(np.float32)  # the same, for the warp's float32 pixels
# The rectangle around an eye that holds every pixel its lids' shapes are read from, in eye widths along it and above
# and below its centre (the drawn opening's ends reach 1.3 along, the skin above its fitted eye 1.7 up, the cheek
# 0.8 down; the mouth, which changes from frame to frame, lies further down).
_LID_READS = (1.4, 1.8, 0.9)

# A blink's closure over its duration: closing, shut, opening (fractions of the duration).
_CLOSING, _SHUT = 0.30, 0.15
_BLINK_GAP = (0.5, 1.5)  # intervals between onsets: this range times the mean interval (60 / blinks_per_minute)
_DEFAULT_SETTINGS = IdleMotionSettings()  # frozen: one instance serves as every default


class Eye(NamedTuple):
    """One eye from its two corner landmarks, in the head box's pixels: its centre, unit vectors along it (to the
    image's right) and across it (down the face), and its width corner to corner."""

    centre: np.ndarray  # (2,) float32 x, y
    along: np.ndarray  # (2,) float32
    down: np.ndarray  # (2,) float32
    width: float


class HangingLashes(NamedTuple):
    """Long lashes turning with a shutting lid (``_hanging_lashes``): ``weight`` (eh, ew) in [0, 1], how far a pixel
    below its edge takes the hanging lash pixel it shows, read at ``points`` (eh, ew, 2) x, y crop pixels where the
    lash stood; ``erase``, how far a pixel over the lid gives way to the skin between the lashes, with the detail of
    the skin read at ``texture``."""

    weight: np.ndarray | None  # None: none hang
    points: np.ndarray
    erase: np.ndarray | None  # (eh, ew) in [0, 1]: how far the lashes standing over the lid give way to the skin
    texture: np.ndarray  # (eh, ew, 2) x, y crop pixels of the skin whose detail that skin takes


@dataclass(frozen=True)
class Lid:
    """One eye's lids in one frame, over its window of the head box: ``covered`` (eh, ew) in [0, 1], how far a
    pixel the lids now hide may give way to ``skin`` (3,), the cheek's colour below the eye; ``lash`` (eh, ew) the
    lash line's darkening; ``smooth`` (eh, ew) in [0, 1] (None: nowhere), how far a pixel gives way to its values
    averaged across ``span`` pixels (skin stretched into streaks: ``_SMOOTH_FROM``); ``hang`` a photograph's long
    lashes turning with the lid (None: none)."""

    covered: np.ndarray
    lash: np.ndarray
    skin: np.ndarray
    smooth: np.ndarray | None = None
    span: int = 1
    hang: HangingLashes | None = None


class Opening(NamedTuple):
    """A drawn eye's opening as measured on the frame (``_drawn_opening``): ``eye`` re-centred on it along the eye
    line, its width such that s = -1 and 1 are the opening's ends; per column across it (``_CEILING_BINS``, s from -1
    to 1) the opening's top ``upper`` and bottom ``lower`` (t, eye widths of ``eye``, down positive) and the thickness
    ``band`` of the outline drawn along its top (``_OUTLINE_DARK``)."""

    eye: Eye
    upper: np.ndarray
    lower: np.ndarray
    band: np.ndarray


class IdleMotion:
    """Head sway and blinks for frames of ``frame_size`` (H, W) at ``fps`` whose face is at ``layout``.

    ``warp(frame, frame_index)`` is the compositor's hook. Nothing is carried between calls except a memo of the
    seeded blink onsets (the same list whatever order frames are asked in) and one of each eye's lid shapes with the
    pixels around the eye they were read from (the same for the same pixels: a composited frame keeps the reference's
    eyes).
    """

    def __init__(self, layout: FaceLayout, frame_size: tuple[int, int], fps: int, seed: int,
                 settings: IdleMotionSettings = _DEFAULT_SETTINGS, textured_lids: bool = False) -> None:  # fmt: skip
        self.layout = layout
        self.textured_lids = textured_lids  # a photograph: the lid slides down with its own texture (``_eyelids``)
        self.frame_size = (int(frame_size[0]), int(frame_size[1]))
        self.fps = int(fps)
        self.seed = int(seed)
        self.settings = settings
        width = float(layout.face_width)
        eyes = layout.points[:4].mean(axis=0)
        along = layout.eye_right - layout.eye_left
        self._u = along / max(float(np.linalg.norm(along)), 1e-6)  # (2,) along the eyes, to the image's right
        self._v = np.array([-self._u[1], self._u[0]])  # (2,) down the face
        self._head_centre = eyes + _HEAD_BELOW_EYES * width * self._v
        self._pivot = eyes + _PIVOT_BELOW_EYES * width * self._v
        self._amplitude = settings.head_amplitude * width / 100.0 if settings.head_motion else 0.0
        self._sway = _sway_terms(self.seed)  # (4, 3, 3) per degree, per term: weight, angular frequency, phase
        self._onsets = np.zeros(0)
        self._lid_memo: dict[tuple[float, float], tuple[np.ndarray, tuple]] = {}  # per eye (``_lid_shape``)
        self._box = self.moving_box()
        self._grid_setup()

    # ------------------------------------------------------------------ public
    def warp_in_place(self, frame: np.ndarray, frame_index: int) -> np.ndarray:
        """``warp`` writing the moved pixels into ``frame`` itself (a writable composited frame) and returning it."""
        return self.warp(frame, frame_index, out=frame)

    def warp(self, frame: np.ndarray, frame_index: int, out: np.ndarray | None = None) -> np.ndarray:
        """Frame ``frame_index`` moved: (H, W, 3) uint8 -> (H, W, 3) uint8 (the input itself when nothing moves).

        ``out``: where to write the moved frame (``frame`` itself for in place); None: a new array."""
        if frame.shape[:2] != self.frame_size:
            raise ValueError(f"idle motion was set up for {self.frame_size} frames, got {frame.shape[:2]}")
        closure = self.eye_closure(frame_index)
        pose = self.head_pose(frame_index)
        if self._box is None or (closure == 0.0 and not any(pose)):
            if out is not None and out is not frame:
                out[...] = frame
                return out
            return frame
        top, bottom, left, right = self._box
        crop = frame[top:bottom, left:right].astype(np.float32)  # (h, w, 3)
        source, lids = self._source_points(frame, pose, closure)  # (h, w, 2) x, y in crop pixels; the lids
        # A pixel whose source is itself comes back as its own value: the unmoved background stays bit-exact.
        # Bicubic: bilinear resampling at sub-pixel shifts is a low-pass filter (the eval's sharpness of a swaying photo
        # fell to 0.60 of the reference's; bicubic keeps 0.89).
        sampled = _sampled_at(crop, source)  # (h, w, 3)
        for rows, cols, lid in lids:
            window = sampled[rows, cols]  # (eh, ew, 3) a view
            # What the lid covers is skin: where the stretched pixels are not (an iris past a big eye's lid line, a
            # brow sitting close above), it takes the cheek's colour.
            unlike_skin = (np.abs(window - lid.skin).max(axis=-1) - _SKIN_TOLERANCE) / _SKIN_TOLERANCE
            window += (unlike_skin.clip(0.0, 1.0) * lid.covered)[..., None] * (lid.skin - window)
            if lid.hang is not None and lid.hang.erase is not None:  # standing lashes give way to the skin between
                lashes = _lash_share(window, lid.skin)  # (eh, ew)
                texture = _sampled_at(crop, lid.hang.texture)  # (eh, ew, 3)
                detail = texture - _box_mean(texture, lid.span // 2 | 1)  # (eh, ew, 3) boxes half as wide, odd
                fill = _skin_between(window, 1.0 - lashes, lid) + detail
                window += lid.hang.erase[..., None] * (fill - window)
            if lid.smooth is not None:  # streaks of a stretched strip: averaged across the eye (image rows)
                window += lid.smooth[..., None] * (_box_mean(window, lid.span, down=1) - window)
            if lid.hang is not None and lid.hang.weight is not None:  # ... hanging: their pixels, as far as dark
                hanging = _sampled_at(crop, lid.hang.points)  # (eh, ew, 3) the lash pixels they show
                window += (lid.hang.weight * _lash_share(hanging, lid.skin))[..., None] * (hanging - window)
            window *= (1.0 - lid.lash)[..., None]
        if out is None:
            out = frame.copy()
        elif out is not frame:
            out[...] = frame
        # Rounded (the values are >= 0: the cast to uint8 truncates) into the box.
        out[top:bottom, left:right] = np.clip(np.add(sampled, 0.5, out=sampled), 0, 255, out=sampled)
        return out

    def head_pose(self, frame_index: int) -> tuple[float, float, float, float]:
        """(dx, dy, roll radians, nod) of frame ``frame_index``: pixels, positive right / down / clockwise / down."""
        if self._amplitude == 0.0:
            return (0.0, 0.0, 0.0, 0.0)
        t = frame_index / self.fps
        weight, omega, phase = self._sway[..., 0], self._sway[..., 1], self._sway[..., 2]  # (4, 3) each
        wave = (weight * np.sin(omega * t + phase)).sum(axis=1)  # (4,) in about [-1, 1]
        reach = max(float(np.linalg.norm(self._pivot - self.layout.points[:4].mean(axis=0))), 1.0)
        a = self._amplitude
        return (float(a * _SWAY_X * wave[0]), float(a * _SWAY_Y * wave[1]), float(a * _ROLL_AT_EYES * wave[2] / reach),
                float(a * _NOD * wave[3]))

    def eye_closure(self, frame_index: int) -> float:
        """How shut the eyes are in frame ``frame_index``: 0 open .. 1 shut."""
        if self.settings.blinks_per_minute <= 0:
            return 0.0
        t = frame_index / self.fps
        duration = self.settings.blink_seconds
        onsets = self.blink_onsets(t + duration)
        recent = onsets[(onsets <= t) & (onsets > t - duration)]  # a Python float: lids stay float32
        return float(max((_closure((t - onset) / duration) for onset in recent), default=0.0))

    def blink_onsets(self, until_s: float) -> np.ndarray:
        """Every blink onset (seconds) up to ``until_s``: the first part of one seeded sequence."""
        while not len(self._onsets) or self._onsets[-1] < until_s:
            self._onsets = _onsets(self.seed, self.settings.blinks_per_minute, 2 * len(self._onsets) + 64)
        return self._onsets[self._onsets <= until_s]

    # ------------------------------------------------------------------ geometry
    def moving_box(self) -> tuple[int, int, int, int] | None:
        """(top, bottom, left, right) of the pixels the head field can move, clipped to the frame; None: none."""
        width = self.layout.face_width
        a, b = _HEAD_HALF_WIDTH * width * _STILL_OUTSIDE, _HEAD_HALF_HEIGHT * width * _STILL_OUTSIDE
        half_x = math.hypot(a * self._u[0], b * self._v[0]) + 2
        half_y = math.hypot(a * self._u[1], b * self._v[1]) + 2
        cx, cy = self._head_centre
        height, frame_width = self.frame_size
        top, bottom = max(0, math.floor(cy - half_y)), min(height, math.ceil(cy + half_y) + 1)
        left, right = max(0, math.floor(cx - half_x)), min(frame_width, math.ceil(cx + half_x) + 1)
        return (top, bottom, left, right) if bottom > top + 1 and right > left + 1 else None

    def _grid_setup(self) -> None:
        """The per-pixel constants of the box: coordinates, head and inner-face weights, per-eye frames."""
        if self._box is None:
            return
        top, bottom, left, right = self._box
        h, w = bottom - top, right - left
        self._size = (h, w)
        # The head field is smooth (affine inside, a falloff over a third of a face width): computed on a coarse
        # grid through the box's corners and upsampled bilinearly, it is the same to a hundredth of a pixel.
        stride = max(1, min(h, w) // _FIELD_CELLS)
        rows, cols = -(-(h - 1) // stride) + 1, -(-(w - 1) // stride) + 1
        ys, xs = np.meshgrid(np.linspace(top, bottom - 1, rows, dtype=np.float32),
                             np.linspace(left, right - 1, cols, dtype=np.float32), indexing="ij")  # fmt: skip
        self._origin = np.array([left, top], dtype=np.float32)
        frame_points = np.stack([xs, ys], axis=-1)  # (rows, cols, 2) frame pixels
        px, py = xs - left, ys - top  # (rows, cols) each: crop pixels
        width = float(self.layout.face_width)
        eyes = self.layout.points[:4].mean(axis=0)
        head = self._ellipse_weight(frame_points, self._head_centre, _HEAD_HALF_WIDTH * width,
                                    _HEAD_HALF_HEIGHT * width, _RIGID_INSIDE, _STILL_OUTSIDE)  # fmt: skip
        inner_centre = eyes + _INNER_BELOW_EYES * width * self._v
        inner = self._ellipse_weight(frame_points, inner_centre, _INNER_HALF_WIDTH * width,
                                     _INNER_HALF_HEIGHT * width, 0.5, 1.1)  # fmt: skip
        # The inverse head motion is linear in these per-point terms (``_source_points``): one small matmul a frame.
        self._terms = np.stack([px, py, head * px, head * py, head, inner], axis=-1)  # (rows, cols, 6)
        self._eyes = [self._eye_frame(self.layout.points[0:2]), self._eye_frame(self.layout.points[2:4])]
        self._eye_windows = [self._eye_window(eye) for eye in self._eyes]

    def _ellipse_weight(self, points: np.ndarray, centre: np.ndarray, half_u: float, half_v: float,
                        inside: float, outside: float) -> np.ndarray:  # fmt: skip
        """1 within ``inside`` of the ellipse's radius, smoothly 0 from ``outside`` -> (h, w) float32."""
        offset = points - centre.astype(np.float32)  # (h, w, 2)
        u = offset @ self._u.astype(np.float32)
        v = offset @ self._v.astype(np.float32)
        radius = np.sqrt((u / half_u) ** 2 + (v / half_v) ** 2)  # (h, w)
        x = ((radius - inside) / (outside - inside)).clip(0.0, 1.0)
        return 1.0 - x * x * (3.0 - 2.0 * x)

    def _eye_frame(self, corners: np.ndarray) -> Eye:
        """(centre, along, down) in crop pixels and the eye's width, from its two corner landmarks."""
        along = corners[0] - corners[1]
        if along @ self._u < 0:
            along = -along
        width = max(float(np.linalg.norm(along)), 1.0)
        along = along / width
        down = np.array([-along[1], along[0]])
        centre = corners.mean(axis=0) - self._origin
        return Eye(*(np.asarray(a, dtype=np.float32) for a in (centre, along, down)), width)

    def _eye_window(self, eye: Eye) -> tuple[slice, slice]:
        """The rows and columns of the box the eyelid field of ``eye`` can reach, however the head has moved (the
        eyelids move points of the unmoved face, at most the sway's full reach from where they are drawn)."""
        centre, _, _, width = eye
        sway = self._amplitude * (_SWAY_X + _SWAY_Y + _ROLL_AT_EYES + _NOD)
        photo = _PHOTO_LIDS[0] + _LID_BAND + _LID_REACH + (_LASH_MAX if self.textured_lids else 0.0)
        reach = max(_EYE_HALF_SPAN, _SKIN_ABOVE, _SKIN_BELOW, photo) * width + sway + 2.0
        h, w = self._size
        x, y = float(centre[0]), float(centre[1])
        rows = slice(max(0, int(y - reach)), min(h, math.ceil(y + reach) + 1))
        cols = slice(max(0, int(x - reach)), min(w, math.ceil(x + reach) + 1))
        return rows, cols

    # ------------------------------------------------------------------ the source map
    def _source_points(self, frame: np.ndarray, pose: tuple[float, float, float, float],
                       closure: float) -> tuple[np.ndarray, list[tuple[slice, slice, Lid]]]:  # fmt: skip
        """Where each output pixel of the box samples the input -> (h, w, 2) crop pixels: the inverse head motion,
        then the eyelids of the unmoved face; and per eye window (rows, cols, its ``Lid``) when blinking."""
        dx, dy, roll, nod = pose
        # The rigid inverse R(-roll) (p - pivot - d) + pivot, minus p, is affine in p: (R(-roll) - I) p + offset; it
        # moves each point by its head weight, and the nod moves the inner face by its own weight:
        #   source = p + weight ((R(-roll) - I) p + offset) - inner nod v
        c, s = math.cos(roll), math.sin(roll)
        pivot = self._pivot - self._origin
        offset = pivot - np.array([[c, s], [-s, c]]) @ (pivot + np.array([dx, dy]))
        nod_x, nod_y = nod * self._v
        coefficients = np.array([[1.0, 0.0, c - 1.0, s, float(offset[0]), -nod_x],
                                 [0.0, 1.0, -s, c - 1.0, float(offset[1]), -nod_y]], dtype=np.float32)  # (2, 6)
        points = self._terms @ coefficients.T  # (rows, cols, 2)
        if points.shape[:2] != self._size:
            points = _upsampled(points, self._size)  # (h, w, 2)
        lids = []
        if closure > 0.0:
            for eye, (rows, cols) in zip(self._eyes, self._eye_windows):
                skin, lashes, stretch_top, opening = self._lid_shape(frame, eye)
                if opening is not None:  # the lids of the drawn opening measured, over its own window
                    eye, (rows, cols) = opening.eye, self._eye_window(opening.eye)
                moved, covered, lash, smooth, hang = _eyelids(points[rows, cols], eye, closure, stretch_top,
                                                              self.textured_lids, lashes, opening)  # fmt: skip
                points[rows, cols] = moved
                if self.textured_lids:  # the lid's own pixels, never a flat colour
                    span = 2 * round(0.5 * _SMOOTH_SPAN * eye.width) + 1  # odd: centred
                    if lashes is not None:  # wider: the skin between dense lashes
                        span = 2 * round(0.5 * _LASH_SPAN * eye.width) + 1
                    lids.append((rows, cols, Lid(np.zeros_like(covered), lash, skin,
                                                 smooth if (smooth > 0).any() else None, span, hang)))  # fmt: skip
                else:
                    lids.append((rows, cols, Lid(covered, lash, skin)))
        return points, lids

    def _lid_shape(self, frame: np.ndarray, eye: Eye) -> tuple:
        """(skin, lashes, stretch_top, opening) of ``eye`` on ``frame`` for ``_eyelids`` (the cheek's colour and what
        a photograph's or a drawn face's lids are shaped from): pure functions of the pixels around the eye
        (``_LID_READS``), remembered with them and computed again where they differ."""
        origin = self._origin
        reads = frame[self._read_box(eye)]
        key = (float(eye.centre[0]), float(eye.centre[1]))
        remembered = self._lid_memo.get(key)
        if remembered is not None and np.array_equal(remembered[0], reads):
            return remembered[1]
        skin = _cheek_colour(frame, eye, origin)
        lashes = opening = None
        if self.textured_lids:
            lashes = _lash_tops(frame, eye, origin, skin)
            stretch_top = _stretch_top(frame, eye, origin, skin, lashes)
        else:
            opening = _drawn_opening(frame, eye, origin, skin)
            stretch_top = _drawn_stretch_top(frame, opening.eye if opening is not None else eye, origin, skin, opening)
        shape = (skin, lashes, stretch_top, opening)
        self._lid_memo[key] = (reads.copy(), shape)
        return shape

    def _read_box(self, eye: Eye) -> tuple[slice, slice]:
        """The frame's rows and columns that hold every pixel ``eye``'s lid shapes are read from (``_LID_READS``)."""
        along, above, below = _LID_READS
        centre, unit_along, unit_down = (part.astype(np.float64) for part in eye[:3])
        corners = np.array([centre + self._origin + (a * unit_along + b * unit_down) * eye.width
                            for a in (-along, along) for b in (-above, below)])  # (4, 2) x, y  # fmt: skip
        (left, top), (right, bottom) = np.floor(corners.min(axis=0)) - 1, np.ceil(corners.max(axis=0)) + 2
        height, width = self.frame_size
        return slice(max(0, int(top)), min(height, int(bottom))), slice(max(0, int(left)), min(width, int(right)))


def _eyelids(points: np.ndarray, eye: Eye, closure: float, stretch_top: np.ndarray, textured: bool,
             lashes: np.ndarray | None = None,
             opening: Opening | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                                      HangingLashes | None]:  # fmt: skip
    """``points`` (h, w, 2) moved to where the eyelids of one eye, shut by ``closure``, take them from; where the
    lids now cover the eye opening (h, w) in [0, 1] (see ``Lid.covered``); the darkening (h, w) of the lash
    line drawn along the closing upper lid's edge (a shut eye shows its lashes; the skin pulled over it has none);
    how far (h, w) each pixel is smoothed across the eye (``Lid.smooth``; zeros on a drawn eye); and the long
    ``lashes`` hanging below the lid's edge (None: none hang).

    The upper lid's band slides down whole and the skin above it, from ``stretch_top`` (per ceiling bin across the
    eye), stretches to follow. ``textured`` (a photograph; ``stretch_top`` from ``_stretch_top``): the band is the
    lid's own, ``_LID_BAND`` above its edge (its creases, lashes and skin keep their detail, where stretching the thin
    band of skin above the eye over it left a smooth patch); ``lashes`` (see ``_lash_tops``; None: none): where long
    lashes stand above it, they stretch with the skin above to follow it (not averaged across the eye) and turn as it
    closes (``_hanging_lashes``).

    Otherwise (a drawn eye; ``stretch_top`` from ``_drawn_stretch_top``) the lids close over its measured ``opening``
    (None: their drawn shape, ``_UPPER_LID``), the band is the outline drawn along its top (none without it), and the
    stretched skin may give way to the cheek's colour (``covered``): the creases and lines drawn there would stretch
    into streaks."""
    centre, along, down, width = eye
    offset = points - centre  # (h, w, 2)
    s = (offset @ along) / (_EYE_HALF_SPAN * width)  # (h, w)
    t = (offset @ down) / width  # (h, w) eye widths, down positive
    shape = np.cos(0.5 * math.pi * s.clip(-1.0, 1.0)).clip(0.0, None) ** 0.5  # (h, w): 0 at and past the corners
    upper_lid, lower_lid = _PHOTO_LIDS if textured else (_UPPER_LID, _LOWER_LID)
    upper, lower = -upper_lid * shape, lower_lid * shape
    band = 0.0  # a drawn lid's outline band below its top (``Opening.band``), sliding down with its edge
    if opening is not None:
        upper, lower = _across_bins(opening.upper, s), _across_bins(opening.lower, s)
        band = np.minimum(_across_bins(opening.band, s), 0.5 * (lower - upper)).clip(0.0, None)  # (h, w): corners
        upper = upper + band
    meet = upper + _MEET * (lower - upper)
    upper_now = upper + closure * (meet - upper)  # where the upper lid's edge is drawn
    lower_now = lower + closure * (meet - lower)
    bottom = _SKIN_BELOW
    smooth = np.zeros_like(t)
    column = np.round((s.clip(-1.0, 1.0) + 1.0) * (0.5 * (_CEILING_BINS - 1))).astype(np.intp)  # (h, w) ceiling bins
    band_top = upper - (_LID_BAND if textured else band)  # the lid's band, now from moved_top to upper_now
    top = np.minimum(stretch_top[column], band_top - _MIN_STRETCH)
    moved_top = band_top + (upper_now - upper)
    lid = (t > moved_top) & (t <= upper_now)
    source = np.where(lid, t - (upper_now - upper), t)
    above = (t >= top) & (t <= moved_top)  # the skin above, stretched to follow
    source = np.where(above, top + (t - top) * (band_top - top) / (moved_top - top), source)
    hang = None
    if textured:
        stretch = (moved_top - top) / np.maximum(band_top - top, 1e-6)  # (h, w) output per source length
        ends = smoothstep((t - top) / _SMOOTH_EDGE) * smoothstep((moved_top - t) / _SMOOTH_EDGE)
        smooth = above * ends * ((stretch - _SMOOTH_FROM) / (_SMOOTH_FULL - _SMOOTH_FROM)).clip(0.0, 1.0)
        if lashes is not None:  # lashes stretched under 2x stay strokes: averaged, they smeared
            smooth = smooth * (lashes[column] >= band_top - _MIN_STRETCH)
            hang = _hanging_lashes(points, t, s, eye, lashes, stretch_top, upper, upper_now, lower, closure)
    below = (t >= lower_now) & (t <= bottom)  # the lower lid pushed up
    source = np.where(below, bottom - (bottom - t) * (bottom - lower) / (bottom - lower_now), source)
    inside = np.abs(s) < 1.0
    shift = np.where(inside, source - t, 0.0) * width  # (h, w) pixels along ``down``
    thickness = max(_LASH_THICKNESS * width, 0.7)  # pixels
    edge = (t - upper_now) * width / thickness  # (h, w) lash thicknesses below the upper lid's edge
    lash = _LASH_DARKNESS * closure * shape * np.exp(-edge * edge) * inside  # (h, w)
    # Within the part of the opening a lid now hides, fading in over _SKIN_FADE from its edges (no seam in a photo).
    # (h, w) eye widths inside, < 0 outside: a photograph's lid band, a drawn lid's stretched skin
    under_upper = np.minimum(t - upper, upper_now - t) if textured else np.minimum(t - top, moved_top - t)
    under_lower = np.minimum(t - lower_now, lower - t)
    depth = np.maximum(under_upper, under_lower).clip(0.0, _SKIN_FADE) / _SKIN_FADE
    side = ((1.0 - np.abs(s)) / _SKIN_FADE).clip(0.0, 1.0)
    covered = depth * side * closure**2  # (h, w): a lid barely moved keeps its own pixels, a shut one is skin
    smooth = smooth * inside * ((1.0 - np.abs(s)) / _SKIN_FADE).clip(0.0, 1.0)  # nothing past the eye's corners
    return points + shift[..., None] * down, covered, lash, smooth, hang


def _hanging_lashes(points: np.ndarray, t: np.ndarray, s: np.ndarray, eye: Eye, lashes: np.ndarray,
                    stretch_top: np.ndarray, upper: np.ndarray, upper_now: np.ndarray,
                    lower: np.ndarray, closure: float) -> HangingLashes:  # fmt: skip
    """The long lashes of one eye (``lashes``: their tips per column, see ``_lash_tops``) turned by ``closure``: those
    standing over the lid, from the stretch's ``stretch_top`` down to its edge ``upper_now`` (t, eye widths, per
    pixel), give way to the skin between them as it closes, are a fringe along that edge seen end on, then hang below
    it, mirrored about the lid's edge at rest ``upper`` and shortened (``_LASH_HANG``). ``points`` (h, w, 2) are where
    each pixel (at ``s``, ``t``) of the unmoved face is. Per column, linearly between the bins: no steps."""
    _, _, down, width = eye
    bins = _band_top(np.linspace(-1.0, 1.0, _CEILING_BINS)).astype(np.float32)  # (bins,)
    lashed = _across_bins((lashes < bins - _MIN_STRETCH).astype(np.float32), s)  # (h, w) in [0, 1]
    tips, top = _across_bins(lashes, s), _across_bins(np.minimum(stretch_top, bins - _MIN_STRETCH), s)  # (h, w)
    side = ((1.0 - np.abs(s)) / _SKIN_FADE).clip(0.0, 1.0) * lashed  # (h, w)
    turned = float(smoothstep(np.float64((closure - _LASH_TURN[0]) / (_LASH_TURN[1] - _LASH_TURN[0]))))
    length = np.maximum(upper - tips, 1e-6)  # (h, w) eye widths
    fringe = _LASH_FRINGE * turned * math.sin(math.pi * closure)  # seen end on: a fringe along the edge
    stand = max(math.cos(math.pi * closure), fringe)  # the lashes' height left standing, per their length
    erase = lashed * smoothstep((1.0 - np.abs(s)) / _LASH_EDGE[0]) * smoothstep((t - top) / _LASH_EDGE[1]) * turned
    erase = erase * smoothstep((upper_now - stand * length - t) / _LASH_EDGE[1])  # (h, w)
    drop = max(-math.cos(math.pi * closure), fringe) * _LASH_HANG  # hanging length per standing length
    below = t - upper_now  # (h, w) eye widths under the lid's edge
    stood = upper - below / max(drop, 1e-6)  # (h, w) where that part of the lash stood
    along = (upper - stood) / length  # 0 at the root .. 1 at the tip
    hanging = (below > 0.0) & (along <= 1.0) & (drop > 0.0)
    weight = np.where(hanging, ((1.0 - along) / _LASH_FADE).clip(0.0, 1.0) * side, 0.0)
    mirrored = 2.0 * lower - t  # (h, w) the skin under the eye, mirrored about its lower lid
    return HangingLashes(weight if (weight > 0.0).any() else None,
                         points + ((stood - t) * width)[..., None] * down,
                         erase if (erase > 0.0).any() else None,
                         points + ((mirrored - t) * width)[..., None] * down)  # fmt: skip


def _skin_between(window: np.ndarray, skin: np.ndarray, lid: Lid) -> np.ndarray:
    """(eh, ew, 3) the mean of ``window``'s pixels weighted by ``skin`` (eh, ew) in [0, 1] over a box of ``lid.span``
    pixels around each pixel, and of ``lid.skin`` with the weight of a tenth of the box (the box all lashes)."""
    sums = _box_mean(np.concatenate([window * skin[..., None], skin[..., None]], axis=-1), lid.span)  # (eh, ew, 4)
    return (sums[..., :3] + 0.1 * lid.skin) / (sums[..., 3:] + 0.1)


def _box_mean(window: np.ndarray, span: int, down: int | None = None) -> np.ndarray:
    """(eh, ew, c) ``window`` (c <= 4) averaged over ``span`` x ``down`` (None: ``span``) pixels, edges replicated."""
    return cv2.blur(window, (span, span if down is None else down), borderType=cv2.BORDER_REPLICATE)


def _lash_share(rgb: np.ndarray, skin: np.ndarray) -> np.ndarray:
    """(eh, ew) in [0, 1] how much each pixel of ``rgb`` (eh, ew, 3) is lash: darker than the ``skin``'s grey by
    ``_LASH_DARK`` (none at the first share of it, all at the second)."""
    grey = (rgb @ _GREY_32) / max(float(_GREY_32 @ skin), 1.0)
    return ((_LASH_DARK[0] - grey) / (_LASH_DARK[0] - _LASH_DARK[1])).clip(0.0, 1.0)


def _sampled_at(image: np.ndarray, points: np.ndarray) -> np.ndarray:
    """(eh, ew, 3) float32 ``image`` (h, w, 3) float32 read bicubically, edges replicated, at ``points`` (eh, ew, 2)."""
    return cv2.remap(image, np.ascontiguousarray(points), None, cv2.INTER_CUBIC, borderMode=cv2.BORDER_REPLICATE)


def _upsampled(field: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """(h, w, c) ``field`` (rows, cols, c) read bilinearly at ``size`` (h, w) points spread evenly from its first row
    and column to its last (``align_corners``): across, then down."""
    for axis in (1, 0):
        count, out = field.shape[axis], size[axis]
        at = np.arange(out, dtype=np.float32) * np.float32((count - 1) / max(out - 1, 1))
        index = np.minimum(at.astype(np.intp), count - 2)  # the point before each (np.take: 10x faster than [:, index])
        part = (at - index).astype(np.float32).clip(0.0, 1.0).reshape((out,) + (1,) * (2 - axis))  # the way to the next
        field, after = np.take(field, index, axis=axis), np.take(field, index + 1, axis=axis)
        field += (after - field) * part
    return field


def _stretch_top(frame: np.ndarray, eye: Eye, origin: np.ndarray, skin: np.ndarray,
                 lashes: np.ndarray | None = None) -> np.ndarray:
    """(_CEILING_BINS,) per column across one eye (s from -1 to 1), where the skin stretched over the closing lid
    starts (t, eye widths, down positive): ``_LID_REACH`` above the lid's band, or lower, below anything there darker
    than the ``skin`` (a brow, a glasses rim), which stays in front, or at the tips of ``lashes`` (``_lash_tops``),
    which stretch to follow the lid (a pure function of the frame's pixels)."""
    s = np.linspace(-1.0, 1.0, _CEILING_BINS)
    band_top = _band_top(s)  # (bins,)
    reach, up = band_top - _LID_REACH, _LID_REACH
    if lashes is not None:  # lashed columns: skin up to _LASH_HEADROOM above the tips stretches with the lashes
        tops = lashes.astype(np.float64)
        lashed = tops < band_top - _MIN_STRETCH
        reach, up = np.where(lashed, np.minimum(reach, tops - _LASH_HEADROOM), reach), _LID_REACH + _LASH_MAX
    t = band_top[None] - np.arange(_CEILING_START, up, _CEILING_STEP)[:, None]  # (steps, bins) going up
    dark = _darker_than_skin(frame, eye, origin, np.broadcast_to(s * _EYE_HALF_SPAN, t.shape), t, skin)
    if lashes is not None:  # the lashes slide with the lid; dark above them stays in front
        dark &= t < lashes[None]
    smooth = _below_dark(dark, t, reach)
    if lashes is not None:  # long lashes stretch to follow the lid (1.5-2x), at least from their tips
        smooth = np.where(lashed, np.minimum(smooth, tops), smooth)
    return smooth.astype(np.float32)


def _drawn_stretch_top(frame: np.ndarray, eye: Eye, origin: np.ndarray, skin: np.ndarray,
                       opening: Opening | None = None) -> np.ndarray:  # fmt: skip
    """(_CEILING_BINS,) per column across a drawn eye (s from -1 to 1), where the skin stretched over the closing lid
    starts (t, eye widths, down positive): ``_SKIN_ABOVE`` above the eye, or lower, below anything from just above
    there down to the lid's edge (``opening``'s top, or the drawn one's) unlike the ``skin`` (a brow, a crease, a
    glasses rim), which stays in front (a pure function of the frame's pixels)."""
    s = np.linspace(-1.0, 1.0, _CEILING_BINS)
    lid = -_UPPER_LID * np.cos(0.5 * np.pi * s).clip(0.0, None) ** 0.5  # (bins,) the drawn upper lid's edge
    if opening is not None:
        lid = opening.upper.astype(np.float64)
    up = _SKIN_ABOVE + _CEILING_GAP  # what is dark just above the stretch's reach blurs into it
    t = lid[None] - np.arange(_CEILING_START, up, _CEILING_STEP)[:, None]  # (steps, bins) going up
    pixels = _pixels_at(frame, eye, origin, np.broadcast_to(s * _EYE_HALF_SPAN, t.shape), t)  # (steps, bins, 3)
    dark = (np.abs(pixels - skin).max(axis=-1) > _DRAWN_UNLIKE) & (t >= -up)
    return _below_dark(dark, t, np.full(_CEILING_BINS, -_SKIN_ABOVE)).astype(np.float32)


def _drawn_opening(frame: np.ndarray, eye: Eye, origin: np.ndarray, skin: np.ndarray) -> Opening | None:
    """A drawn eye's opening measured on ``frame`` (see ``_DRAWN_EYE``): what is unlike the ``skin`` and connected to
    the middle of the eye whose corners ``eye`` has; None where there is nothing there or it reaches the sampled box's
    edge (a pure function of the frame's pixels)."""
    u = np.arange(-_OPENING_ALONG, _OPENING_ALONG + 1e-9, _OPENING_STEP)  # (nu,) eye widths along
    t = np.arange(_OPENING_ACROSS[0], _OPENING_ACROSS[1] + 1e-9, _OPENING_STEP)  # (nt,) eye widths down
    grid_u, grid_t = np.meshgrid(u, t)  # (nt, nu) each
    pixels = _pixels_at(frame, eye, origin, grid_u, grid_t)  # (nt, nu, 3)
    unlike = np.abs(pixels - skin).max(axis=-1) > _DRAWN_EYE
    opening = _connected(unlike, unlike & (np.abs(grid_u) < 0.2) & (np.abs(grid_t) < 0.15))  # (nt, nu)
    if not opening.any() or opening[[0, -1]].any() or opening[:, [0, -1]].any():
        return None
    columns = np.flatnonzero(opening.any(axis=0))
    first, last = u[columns[0]] - 0.5 * _OPENING_STEP, u[columns[-1]] + 0.5 * _OPENING_STEP  # its ends, eye widths
    centre, along, down, width = eye
    fitted = Eye(centre + along * float(0.5 * (first + last) * width), along, down,
                 float(0.5 * (last - first) / _EYE_HALF_SPAN * width))  # s = -1 and 1 at its ends  # fmt: skip
    present = opening[:, columns[0] : columns[-1] + 1]  # (nt, its columns)
    known = present.any(axis=0)
    outline = _OUTLINE_DARK * float(skin.astype(np.float64) @ _GREY)
    dark = pixels[:, columns[0] : columns[-1] + 1] @ _GREY < outline  # (nt, its columns)
    reach = int(np.ceil(_OUTLINE_MAX / _OPENING_STEP))  # samples from each column's top
    below = np.minimum(np.arange(reach)[:, None] + present.argmax(axis=0)[None], len(t) - 1)  # (reach, cols)
    from_top = np.take_along_axis(dark, below, axis=0)  # (reach, cols): the outline, after its soft top edge
    ended = (np.cumsum(from_top, axis=0) > 0) & ~from_top  # past the first dark run
    run = np.where(ended.any(axis=0), ended.argmax(axis=0), np.where(from_top.any(axis=0), reach, 0))  # (cols,)
    band = np.minimum(run[known], np.median(run[known])) * _OPENING_STEP  # (known columns,) eye widths
    top = np.where(known, t[present.argmax(axis=0)] - 0.5 * _OPENING_STEP, np.inf)  # eye widths of ``eye``
    bottom = np.where(known, t[len(t) - 1 - present[::-1].argmax(axis=0)] + 0.5 * _OPENING_STEP, -np.inf)
    half = _OPENING_SPAN // 2
    top = np.lib.stride_tricks.sliding_window_view(np.pad(top, half, mode="edge"), _OPENING_SPAN).min(axis=1)
    bottom = np.lib.stride_tricks.sliding_window_view(np.pad(bottom, half, mode="edge"), _OPENING_SPAN).max(axis=1)
    top, bottom, middle = top[known], bottom[known], u[columns[0] : columns[-1] + 1][known]
    at = np.linspace(first, last, _CEILING_BINS)  # (bins,) eye widths along
    scale = width / fitted.width  # eye widths of ``eye`` -> of ``fitted``
    tables = (np.interp(at, middle, values) * scale for values in (top, bottom, band))
    return Opening(fitted, *(table.astype(np.float32) for table in tables))


def _connected(mask: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """What of ``mask`` (h, w) connects to ``seed`` (h, w), through its four neighbours."""
    reached = seed & mask
    while True:
        grown = reached.copy()
        grown[1:] |= reached[:-1]
        grown[:-1] |= reached[1:]
        grown[:, 1:] |= reached[:, :-1]
        grown[:, :-1] |= reached[:, 1:]
        grown &= mask
        if np.array_equal(grown, reached):
            return reached
        reached = grown


def _across_bins(table: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``table`` (bins,) given at s = -1 .. 1 across an eye, linearly between its bins, at ``s`` (h, w)."""
    x = (s.clip(-1.0, 1.0) + 1.0) * (0.5 * (table.size - 1))
    low = np.minimum(np.floor(x), table.size - 2)
    index = low.astype(np.intp)
    return table[index] + (x - low) * (table[index + 1] - table[index])


def _below_dark(dark: np.ndarray, t: np.ndarray, reach: np.ndarray) -> np.ndarray:
    """(_CEILING_BINS,) per column, ``_CEILING_GAP`` below the first ``dark`` (steps, bins) step of ``t`` going up,
    ``reach`` where there is none, the lowest of ``_CEILING_SPAN`` neighbouring columns smoothed across them (a rim
    seen in one column holds its neighbours too; no seams)."""
    first = dark.argmax(axis=0)  # (bins,) the first dark step going up (0 where there is none: masked next)
    top = np.where(dark.any(axis=0), np.maximum(reach, t[first, np.arange(_CEILING_BINS)] + _CEILING_GAP), reach)
    half = _CEILING_SPAN // 2
    padded = np.pad(top, half, mode="edge")
    windows = np.lib.stride_tricks.sliding_window_view(padded, _CEILING_SPAN)  # (bins, span)
    lowest = np.pad(windows.max(axis=1), half, mode="edge")
    return np.lib.stride_tricks.sliding_window_view(lowest, _CEILING_SPAN).mean(axis=1)


def _lash_tops(frame: np.ndarray, eye: Eye, origin: np.ndarray, skin: np.ndarray) -> np.ndarray | None:
    """(_CEILING_BINS,) per column across one eye, how far up (t, eye widths, down positive) long dark lashes rooted
    in the lid's band stand, ``_CEILING_GAP`` above their tips (the band's top where there are none); None where no
    column has any (a pure function of the frame's pixels)."""
    fine = 8  # samples per bin across the eye
    s = np.linspace(-1.0, 1.0, _CEILING_BINS * fine)
    band_top = _band_top(s)  # (samples,)
    rise = np.arange(-0.5 * _LID_BAND, _LASH_MAX + _CEILING_STEP / 2, _CEILING_STEP / 2)  # going up from band_top
    t = band_top[None] - rise[:, None]  # (rows, samples)
    dark = _darker_than_skin(frame, eye, origin, np.broadcast_to(s * _EYE_HALF_SPAN, t.shape), t, skin)
    wide = max(1, round(_LASH_WIDE / (2.0 * _EYE_HALF_SPAN / (s.size - 1))))  # samples across the window
    kernel = np.ones(wide) / wide
    share = np.stack([np.convolve(row, kernel, mode="same") for row in dark.astype(np.float64)])  # (rows, samples)
    share = share[:, fine // 2 :: fine]  # (rows, bins) at the bins' centres
    rooted = share[rise <= 0.0].mean(axis=0) >= _LASH_ROOT  # (bins,)
    above = share[rise > 0.0] >= _LASH_TIP  # (rows above the band, bins)
    length = np.where(above.all(axis=0), above.shape[0], above.argmin(axis=0)) * (_CEILING_STEP / 2)  # eye widths
    # Long lashes stand along the middle of the lid, in a run of columns (a brow or hair meets the band at a corner,
    # a rim or a crease's shadow stands less high); once an eye has them, they are drawn along its whole lid.
    tall = np.r_[0, (rooted & (length >= _LASH_MIN) & (np.abs(s[fine // 2 :: fine]) <= _LASH_MIDDLE)).astype(int), 0]
    starts, ends = np.flatnonzero(np.diff(tall) == 1), np.flatnonzero(np.diff(tall) == -1)
    if not np.any(ends - starts >= _LASH_RUN):
        return None
    height = np.where(rooted & (length > 0), length + _CEILING_GAP, 0.0)
    height = np.lib.stride_tricks.sliding_window_view(np.pad(height, 1, mode="edge"), 3).max(axis=1)  # no notches
    top = _band_top(np.linspace(-1.0, 1.0, _CEILING_BINS)) - height  # (bins,)
    return top.astype(np.float32)


def _band_top(s: np.ndarray) -> np.ndarray:
    """The top of a photograph's sliding lid band (t, eye widths, down positive) at ``s`` across the eye, as in
    ``_eyelids``."""
    return -_PHOTO_LIDS[0] * np.cos(0.5 * np.pi * s) ** 0.5 - _LID_BAND


def _darker_than_skin(frame: np.ndarray, eye: Eye, origin: np.ndarray, s: np.ndarray, t: np.ndarray,
                      skin: np.ndarray) -> np.ndarray:  # fmt: skip
    """Whether ``frame``'s pixels at ``s`` (eye widths along) and ``t`` (across) are darker than ``_DARK`` of the
    ``skin``'s grey (a brow, a rim, lashes)."""
    return _pixels_at(frame, eye, origin, s, t) @ _GREY < _DARK * float(skin.astype(np.float64) @ _GREY)


def _cheek_colour(frame: np.ndarray, eye: Eye, origin: np.ndarray) -> np.ndarray:
    """(3,) float32 the median colour of ``frame``'s skin just below one eye (a pure function of the frame's pixels)."""
    s, t = np.meshgrid(np.linspace(-0.3, 0.3, 7), np.linspace(*_CHEEK_BAND, 5))  # eye widths
    return column_median(_pixels_at(frame, eye, origin, s, t).reshape(-1, 3)).astype(np.float32)


def _pixels_at(frame: np.ndarray, eye: Eye, origin: np.ndarray, s: np.ndarray, t: np.ndarray) -> np.ndarray:
    """(..., 3) float64 the pixels of ``frame`` nearest the points ``s`` along one eye and ``t`` down across it (eye
    widths from its centre, in the head box's pixels that start at ``origin``), clipped to the frame."""
    centre, along, down = (part.astype(np.float64) for part in eye[:3])
    return nearest_pixels(frame, centre + origin + (s[..., None] * along + t[..., None] * down) * eye[3])


def _closure(phase: float) -> float:
    """Eye closure at ``phase`` (0..1) of a blink: a smooth close, a moment shut, a slower smooth open."""
    if phase < _CLOSING:
        x = phase / _CLOSING
    elif phase < _CLOSING + _SHUT:
        return 1.0
    else:
        x = (1.0 - phase) / (1.0 - _CLOSING - _SHUT)
    x = min(max(x, 0.0), 1.0)
    return x * x * (3.0 - 2.0 * x)


def _sway_terms(seed: int) -> np.ndarray:
    """(4, 3, 3): for dx, dy, roll and nod, three sinusoids as (weight, angular frequency, phase); the weights of a
    degree sum to 1, so each moves within [-1, 1]."""
    rng = SeededUniform([seed, 0x1D1E])  # np.random.default_rng's draws, without its import
    periods = np.exp(rng.uniform(*np.log(_PERIODS_S), (4, 3)))  # (4, 3) seconds
    weights = np.broadcast_to(np.asarray(_SWAY_TERMS) / sum(_SWAY_TERMS), (4, 3))
    phases = rng.uniform(0.0, 2 * math.pi, (4, 3))
    return np.stack([weights, 2 * math.pi / periods, phases], axis=-1)


def _onsets(seed: int, blinks_per_minute: float, count: int) -> np.ndarray:
    """The first ``count`` blink onsets (seconds) of ``seed``'s sequence (the same prefix for any ``count``)."""
    mean = 60.0 / blinks_per_minute
    rng = SeededUniform([seed, 0xB11C])
    first = rng.uniform(0.2, 1.0) * mean
    gaps = np.empty(count)
    for block in range(0, count, 64):  # blocks of one stream: a longer sequence extends a shorter one
        gaps[block : block + 64] = rng.uniform(*_BLINK_GAP, 64)[: count - block] * mean
    return first + np.concatenate([[0.0], np.cumsum(gaps[:-1])])
