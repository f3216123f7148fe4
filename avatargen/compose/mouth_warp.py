"""``MouthWarp`` (``pipeline.mouth=warp``): the reference's own lips, chin and skin move; only the mouth's interior
comes from the generated frame.

Per generated model frame, ``mouth_opening`` reads how open its mouth is: the dark cavity inside the model's mouth
box (pixels darker than the skin around it), as an area over a nominal cavity width, less the dark line of the
model's closed mouth. That is a pure function of the frame (no smoothing, no state: sync keeps offset 0 and a
resumed render the same pixels).

``MouthWarp`` then moves the reference, at output resolution, inside a mouth-and-jaw box placed from the face's
five landmarks (``FaceLayout``: eye corners and nose base, in output pixels): the lip line lies ``LIP_BELOW_NOSE``
eye spans below the nose, the mouth ``MOUTH_HALF_WIDTH`` spans to each side. Below the lip line the lower lip and
jaw move down by ``LOWER_SHARE`` of the opening, in full at the lip centre, falling smoothly to nothing at the mouth
corners; further down the moving part widens to the jaw and fades out below the chin; above it the upper lip rises
by the rest, fading out at the nose. One bicubic ``grid_sample`` of the reference gives the moved pixels. The gap
that opens between the lips is filled with the generated frame's mouth interior (its dark cavity, teeth and tongue
where the model draws them), placed so its cavity centre sits in the gap, at the model-to-output scale, and its
colours shifted so the cavity takes a dark tone of the reference's own lips; its edge is feathered over
``EDGE_SPANS`` under the lips.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from avatargen.compose.layout import FaceLayout

# The model's mouth box in its own frame (fractions of the side; the framing of the training frames puts every mouth
# there: composite.MOUTH_REGION spans x 0.37-0.63, y 0.51-0.70) and the skin bands just above and below it.
MODEL_MOUTH_BOX = (0.38, 0.53, 0.62, 0.70)  # x0, y0, x1, y1
MODEL_SKIN_BANDS = ((0.50, 0.53), (0.70, 0.73))  # rows whose median grey is the skin level
CAVITY_LEVEL = (0.65, 0.45)  # grey / skin grey: not cavity above the first, cavity in full below the second
CLOSED_AREA = 0.0007  # the dark area (fraction of the frame) a closed mouth shows: its lip line, shadows
CAVITY_WIDTH = 0.10  # nominal width of an open mouth's cavity (fraction of the side): area / width = opening height

# The mouth on the reference, in eye spans (outer eye corner to outer eye corner) from the landmarks. Measured on
# skimage's astronaut (lip line 13.5 px below the nose base, span 60 px: 0.225; mouth half-width 0.33) and
# examples/avatar_1.png (0.25; 0.32).
LIP_BELOW_NOSE = 0.24
MOUTH_HALF_WIDTH = 0.34
LOWER_LIP_DEPTH = 0.12  # the lower lip: this far below the lip line it moves with the lip line's profile ...
JAW_HALF_WIDTH = 0.62  # ... then the moving part widens to this half-width towards the chin
JAW_FULL_BELOW = 0.30  # down to this far below the lip line the jaw moves in full ...
JAW_STILL_BELOW = 0.80  # ... and from this far below it nothing moves (the neck, the collar)
LOWER_SHARE = 0.8  # of the opening: the lower lip and jaw move down by this share, the upper lip up by the rest
OPENING_GAIN = 1.6  # output opening over the model's (a photographed mouth opens wider than the drawn one)
MAX_OPENING_SPANS = 0.30  # the opening is held below this (a broken model frame must not tear the chin off)
EDGE_SPANS = 0.025  # the interior's edge is feathered over this (at least a pixel) under the lips
CAVITY_SHADE = 0.3  # the cavity's tone: the reference's lip colour times this ...
CAVITY_LIGHTS = (0.7, 1.3)  # ... times this, from the model's darkest cavity pixels to its skin level (tongue, depth)
TEETH_COLOUR = (192.0, 187.0, 174.0)  # off-white in the mouth's shade, where the model draws teeth ...
TEETH_LEVEL = (0.95, 1.20)  # ... pixels brighter than the model's skin: from this grey / skin (none) to this (all)
MIN_OPENING_PX = 0.05  # an opening below this many output pixels leaves the reference as it is
_GREY = torch.tensor([0.299, 0.587, 0.114])


def mouth_opening(generated: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """How open the mouths of (t, S, S, 3) uint8 model frames are -> (t,) opening height in model pixels (0: closed)
    and (t, 2) the cavity's centre (x, y) in model pixels (the box's centre where there is no cavity)."""
    count, side = generated.shape[0], generated.shape[1]
    x0, y0, x1, y1 = (int(round(f * side)) for f in MODEL_MOUTH_BOX)
    grey = torch.tensor(generated).float() @ _GREY  # (t, S, S); a copy: frames may be read-only
    bands = [grey[:, int(a * side) : int(b * side), x0:x1].reshape(count, -1) for a, b in MODEL_SKIN_BANDS]
    skin = torch.cat(bands, dim=1).median(dim=1).values[:, None, None]  # (t, 1, 1)
    box = grey[:, y0:y1, x0:x1]  # (t, h, w)
    high, low = CAVITY_LEVEL
    cavity = ((high * skin - box) / ((high - low) * skin).clamp_min(1.0)).clamp(0.0, 1.0)  # (t, h, w)
    area = cavity.sum(dim=(1, 2))  # (t,) model pixels
    opening = (area - CLOSED_AREA * side * side).clamp_min(0.0) / (CAVITY_WIDTH * side)  # (t,)
    ys = torch.arange(y0, y1, dtype=torch.float32)[None, :, None]
    xs = torch.arange(x0, x1, dtype=torch.float32)[None, None, :]
    mass = area.clamp_min(1e-6)
    centre = torch.stack([(cavity * xs).sum(dim=(1, 2)) / mass, (cavity * ys).sum(dim=(1, 2)) / mass], dim=1)  # (t, 2)
    default = torch.tensor([(x0 + x1 - 1) / 2, (y0 + y1 - 1) / 2])
    centre = torch.where((area > 1.0)[:, None], centre, default)
    return opening.numpy(), centre.numpy()


@dataclass(frozen=True)
class ModelMapping:
    """Where output pixel (x', y') falls in the model frame: model pixel = scale * output pixel + offset (x and y;
    pixel centres at integers in both)."""

    scale: tuple[float, float]
    offset: tuple[float, float]


class MouthWarp:
    """The mouth of ``background`` (H', W', 3) uint8, the output-sized reference, whose face is at ``layout`` (output
    pixels), moved by the generated model frames; ``to_model`` maps output pixels to model pixels.

    ``paste(generated, frames)`` writes into the (t, H', W', 3) ``frames`` (the reference) the mouth of each
    (t, S, S, 3) generated frame. Nothing is carried between calls.
    """

    def __init__(self, background: np.ndarray, layout: FaceLayout, to_model: ModelMapping):
        self.to_model = to_model
        height, width = background.shape[:2]
        span = max(float(np.linalg.norm(layout.points[0] - layout.points[2])), 1.0)  # outer corner to outer corner
        along = layout.eye_right - layout.eye_left
        u = along / max(float(np.linalg.norm(along)), 1e-6)  # (2,) along the mouth, to the image's right
        v = np.array([-u[1], u[0]])  # (2,) down the face
        self.span, self._u, self._v = span, u, v  # output pixels from outer eye corner to outer eye corner
        self.lip_centre = layout.nose + LIP_BELOW_NOSE * span * v  # (2,) x, y: the middle of the lip line
        self.box = self._moving_box(height, width)
        if self.box is None:
            return
        top, bottom, left, right = self.box
        ys, xs = torch.meshgrid(torch.arange(top, bottom, dtype=torch.float32),
                                torch.arange(left, right, dtype=torch.float32), indexing="ij")  # fmt: skip
        self._pixels = torch.stack([xs, ys], dim=-1)  # (h, w, 2) output pixels
        offset = self._pixels - torch.tensor(self.lip_centre, dtype=torch.float32)
        along_mouth = offset @ torch.tensor(u, dtype=torch.float32) / span  # (h, w) spans
        below_lip = offset @ torch.tensor(v, dtype=torch.float32) / span  # (h, w) spans, down positive
        self._below = below_lip * span  # (h, w) output pixels below the lip line
        self._lip_profile = _bump(along_mouth.abs() / MOUTH_HALF_WIDTH)  # (h, w): 1 at the centre, 0 at the corners
        # (h, w): 0 down to the lower lip's edge (the lip keeps its thickness), 1 from where the jaw moves in full
        jaw = _smoothstep((below_lip - LOWER_LIP_DEPTH) / (JAW_FULL_BELOW - LOWER_LIP_DEPTH))
        half_width = MOUTH_HALF_WIDTH + (JAW_HALF_WIDTH - MOUTH_HALF_WIDTH) * jaw
        fade = 1.0 - _smoothstep((below_lip - JAW_FULL_BELOW) / (JAW_STILL_BELOW - JAW_FULL_BELOW))
        self._lower_profile = _bump(along_mouth.abs() / half_width) * fade  # (h, w)
        nose = _smoothstep(1.0 + below_lip / (0.9 * LIP_BELOW_NOSE))  # (h, w): 0 at the nose, 1 at the lip line
        self._upper_profile = self._lip_profile * nose  # (h, w)
        patch = torch.from_numpy(np.ascontiguousarray(background[top:bottom, left:right])).float()  # (h, w, 3)
        self._patch = patch.permute(2, 0, 1)[None]  # (1, 3, h, w)
        lips = patch[(along_mouth.abs() < 0.3 * MOUTH_HALF_WIDTH) & (below_lip.abs() < 0.06)]  # (n, 3)
        lip_colour = lips.median(dim=0).values if len(lips) else patch.reshape(-1, 3).median(dim=0).values
        self._cavity_tone = lip_colour * CAVITY_SHADE  # (3,)
        self._edge = max(1.0, EDGE_SPANS * span)  # output pixels
        self._max_opening = MAX_OPENING_SPANS * span
        self._output_per_model = 2.0 / (abs(to_model.scale[0]) + abs(to_model.scale[1]))

    def openings(self, generated: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(t,) how far the lips part in output pixels for (t, S, S, 3) model frames, and (t, 2) the model cavity
        centres (``mouth_opening``)."""
        opening, centre = mouth_opening(generated)
        return np.minimum(opening * OPENING_GAIN * self._output_per_model, self._max_opening), centre

    def paste(self, generated: np.ndarray, frames: np.ndarray) -> np.ndarray:
        """Write the mouth of each of the (t, S, S, 3) ``generated`` frames into the (t, H', W', 3) ``frames`` (the
        reference, each) and return them."""
        if self.box is None:
            return frames
        top, bottom, left, right = self.box
        openings, centres = self.openings(generated)
        for i in np.nonzero(openings >= MIN_OPENING_PX)[0]:
            frames[i, top:bottom, left:right] = self._open_mouth(generated[i], float(openings[i]), centres[i])
        return frames

    def _open_mouth(self, generated: np.ndarray, opening: float, cavity_centre: np.ndarray) -> np.ndarray:
        """The box with the lips parted by ``opening`` output pixels and the interior of ``generated`` (S, S, 3)
        between them -> (h, w, 3) uint8."""
        down, up = LOWER_SHARE * opening, (1.0 - LOWER_SHARE) * opening
        below = self._below  # (h, w)
        lower = below >= 0.5 * (down - up) * self._lip_profile  # (h, w): the lower lip's side of the gap
        source = torch.where(lower, below - down * self._lower_profile, below + up * self._upper_profile)
        depth = torch.where(lower, -source, source)  # (h, w) output pixels into the gap (> 0: inside it)
        source = torch.where(lower, source.clamp_min(0.0), source.clamp_max(0.0))
        moved = self._pixels + (source - below)[..., None] * torch.tensor(self._v, dtype=torch.float32)  # (h, w, 2)
        warped = self._sample(self._patch, moved - self._pixels[0, 0], mode="bicubic")  # (3, h, w)
        inside = _smoothstep(depth / self._edge)  # (h, w)
        if float(inside.max()) <= 0.0:
            return _to_uint8(warped)
        interior = self._interior(generated, 0.5 * (down - up), cavity_centre)  # (3, h, w)
        return _to_uint8(warped + inside * (interior - warped))

    def _interior(self, generated: np.ndarray, gap_below: float, cavity_centre: np.ndarray) -> torch.Tensor:
        """The generated frame's mouth interior over the box, its cavity centre on the gap's, in a dark tone of the
        reference's lips -> (3, h, w) float."""
        (sx, sy), (ox, oy) = self.to_model.scale, self.to_model.offset
        gap = self.lip_centre + gap_below * self._v  # (2,) output pixels
        shift = np.asarray(cavity_centre) - np.array([sx * gap[0] + ox, sy * gap[1] + oy])  # model pixels
        model_points = self._pixels * torch.tensor([sx, sy]) + torch.tensor([ox + shift[0], oy + shift[1]])
        image = torch.tensor(generated).float().permute(2, 0, 1)[None]  # (1, 3, S, S)
        sampled = self._sample(image, model_points.float(), mode="bilinear")  # (3, h, w)
        grey = sampled.permute(1, 2, 0) @ _GREY  # (h, w)
        skin, cavity = _model_levels(image[0])
        shade = ((grey - cavity) / max(skin - cavity, 1.0)).clamp(0.0, 1.0)  # (h, w)
        low, high = CAVITY_LIGHTS
        dark = self._cavity_tone[:, None, None] * (low + (high - low) * shade)  # (3, h, w)
        teeth = _smoothstep((grey / max(skin, 1.0) - TEETH_LEVEL[0]) / (TEETH_LEVEL[1] - TEETH_LEVEL[0]))  # (h, w)
        return dark + teeth * (torch.tensor(TEETH_COLOUR)[:, None, None] - dark)

    @staticmethod
    def _sample(image: torch.Tensor, points: torch.Tensor, mode: str) -> torch.Tensor:
        """(1, 3, H, W) sampled at (h, w, 2) pixel coordinates (x, y) of it -> (3, h, w); outside: the edge."""
        height, width = image.shape[2:]
        grid = points * torch.tensor([2.0 / max(width - 1, 1), 2.0 / max(height - 1, 1)]) - 1.0  # (h, w, 2)
        return F.grid_sample(image, grid[None], mode=mode, padding_mode="border", align_corners=True)[0]

    def _moving_box(self, height: int, width: int) -> tuple[int, int, int, int] | None:
        """(top, bottom, left, right) of the output pixels the warp can change, clipped to the frame; None: none."""
        span, u, v = self.span, self._u, self._v
        corners = [self.lip_centre + span * (a * u + b * v)
                   for a in (-JAW_HALF_WIDTH, JAW_HALF_WIDTH) for b in (-LIP_BELOW_NOSE, JAW_STILL_BELOW)]  # fmt: skip
        xs, ys = [c[0] for c in corners], [c[1] for c in corners]
        top, bottom = max(0, int(math.floor(min(ys))) - 2), min(height, int(math.ceil(max(ys))) + 3)
        left, right = max(0, int(math.floor(min(xs))) - 2), min(width, int(math.ceil(max(xs))) + 3)
        return (top, bottom, left, right) if bottom > top + 1 and right > left + 1 else None


def _model_levels(image: torch.Tensor) -> tuple[float, float]:
    """(skin grey, cavity grey) of one (3, S, S) float model frame: the median of the skin bands around its mouth box
    and the 10th percentile of the box."""
    side = image.shape[1]
    x0, y0, x1, y1 = (int(round(f * side)) for f in MODEL_MOUTH_BOX)
    grey = image.permute(1, 2, 0) @ _GREY  # (S, S)
    skin = torch.cat([grey[int(a * side) : int(b * side), x0:x1].reshape(-1) for a, b in MODEL_SKIN_BANDS]).median()
    return float(skin), float(torch.quantile(grey[y0:y1, x0:x1].reshape(-1), 0.1))


def _smoothstep(x: torch.Tensor) -> torch.Tensor:
    x = x.clamp(0.0, 1.0)
    return x * x * (3.0 - 2.0 * x)


def _bump(x: torch.Tensor) -> torch.Tensor:
    """1 at 0, falling smoothly (zero slope at both ends) to 0 at 1 and beyond."""
    return 1.0 - _smoothstep(x)


def _to_uint8(image: torch.Tensor) -> np.ndarray:
    """(3, h, w) float -> (h, w, 3) uint8, rounded."""
    return image.add(0.5).clamp(0, 255).to(torch.uint8).permute(1, 2, 0).numpy()
