"""``MouthWarp`` (``pipeline.mouth=warp``): the reference's own lips, chin and skin move; on a cartoon only the
mouth's interior comes from the generated frame, on a photograph that interior is drawn in the picture's colours.

Per generated model frame, ``mouth_opening`` reads how open its mouth is, as an area inside the model's mouth box
over a nominal cavity width, less what the model's closed mouth shows. What counts depends on how the bundled model
draws the reference's kind (``MouthCue``): on a cartoon avatar an open mouth is a dark cavity between lips that are
always red (pixels darker than the skin around them: over 30 s of speech the reading follows loudness with
correlation 0.73 on the model's frames of ``examples/avatar_1.png``, where the colour cue reads 0.31); on a
photograph it is a smear of colours unlike the skin, seldom dark (pixels whose colour, grey taken out, departs from
the skin's: 0.72 on skimage's astronaut, the dark cue 0.57). Either is a
pure function of the frame (no smoothing, no state: sync keeps offset 0 and a resumed render the same pixels).

On a photograph with its audio file at hand, how far the lips part comes from the speech instead (``drive``, a
``SpeechDrive``: avatargen/compose/speech_drive.py), and on rounded vowels the opened mouth is drawn narrower
(``ROUND_NARROWING``); the model's frame is then not read at all.

``MouthWarp`` then moves the reference, at output resolution, inside a mouth-and-jaw box placed on the reference's
own lips (``avatargen.face.lips``: inner and outer contours in output pixels; without the lip finder,
``estimated_lips`` from the five landmarks). Everything is measured in the mouth's half-width, along the line
between its corners and across it. The lip line is the lower lip's inner edge (closed lips: where they meet; a
smile: under its teeth, which stay with the upper lip). Below it the lower lip and jaw move down by
``LOWER_SHARE`` of the opening, in full at the lip centre, falling smoothly to nothing at the mouth corners; further
down the moving part widens to the jaw and fades out below the chin; above it the upper lip rises by the rest,
fading out towards the nose. One bicubic ``cv2.remap`` of the reference gives the moved pixels. The gap that
opens between the lips, and nothing else, is filled with a mouth interior, its edge feathered over
``EDGE_HALF_WIDTHS`` under the lips: on a photograph (``MouthCue.colour``) teeth, tongue and the mouth's dark drawn
in the picture's own colours (``avatargen.compose.mouth_interior``); on a cartoon the generated frame's (its dark
cavity, teeth and tongue where the model draws them), placed so its cavity centre sits in the gap, at the
model-to-output scale, and its colours shifted so the cavity takes a dark tone of the reference's own lips (teeth
in the reference's own teeth colour where its open lips show them).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

import numpy as np

from avatargen.compose.layout import FaceLayout
from avatargen.compose.mouth_interior import MouthInterior, estimated_teeth, own_teeth
from avatargen.compose.opencv import cv2
from avatargen.compose.speech_drive import SpeechDrive
from avatargen.face.lips import Lips
from avatargen.numeric import LUMA, column_median, nearest_pixels, smoothstep

# The model's mouth box in its own frame (fractions of the side; the framing of the training frames puts every mouth
# there: composite.MOUTH_REGION spans x 0.37-0.63, y 0.51-0.70) and the skin bands just above and below it.
MODEL_MOUTH_BOX = (0.38, 0.53, 0.62, 0.70)  # x0, y0, x1, y1
MODEL_SKIN_BANDS = ((0.50, 0.53), (0.70, 0.73))  # rows whose median grey is the skin level
# All of a model frame that is read (x0, y0, x1, y1): the boxes above and, for the interior, what lies around the
# cavity; an interior reaching past it takes its edge. The decoder decodes only this (``MouthWarp.model_box``).
MODEL_READ_BOX = (0.33, 0.47, 0.67, 0.74)
CAVITY_LEVEL = (0.65, 0.45)  # MouthCue.dark: grey / skin grey: not cavity above the first, in full below the second
# ... and its teeth, which on dark skin stand out more than its cavity: grey / skin grey from none to in full. What
# the reference's own shut mouth reads as teeth (pale lips, a pale backdrop under a short chin) is taken off
# (``shut_mouth``).
TEETH_CUE_LEVEL = (1.10, 1.40)
COLOUR_DEPARTURE = (20.0, 40.0)  # MouthCue.colour: colour distance from the skin's (grey levels), none .. in full
# The area (fraction of the frame) a closed mouth shows, either cue: a drawn lip line and shadows; the model's
# photo mouths in pauses (90th percentile 0.00067 over the pauses of 30 s of speech on the astronaut).
CLOSED_AREA = 0.0007
# A reference whose own shut mouth the dark cue reads this open (model pixels; a dark beard reads ~80) hides its
# mouth from the cue: ``pipeline.mouth=auto`` blends it instead (``still_opening``, ``mouth_choice.mouth_for``).
SHUT_OPENING_MAX = 8.0
CAVITY_WIDTH = 0.10  # nominal width of an open mouth's cavity (fraction of the side): area / width = opening height

# Without the lip finder, the mouth on the reference in eye spans (outer eye corner to outer eye corner) from the
# landmarks (``estimated_lips``). Measured on skimage's astronaut (lip line 13.5 px below the nose base, span 60 px:
# 0.225; mouth half-width 0.33) and examples/avatar_1.png (0.25; 0.32).
LIP_BELOW_NOSE = 0.24  # where the lip line is looked for first ...
LIP_SEARCH = (-0.14, 0.22)  # ... then the lips themselves, this far above and below it: the band of rows whose
# colour departs most from the cheeks' (at least half the strongest departure; joined across gaps of LIP_GAP rows),
# its middle the lip line; no row departing by LIP_DEPARTURE grey levels: the first guess
LIP_DEPARTURE, LIP_GAP = 25.0, 3
MOUTH_HALF_WIDTH = 0.34
ESTIMATED_LIP_THICKNESS = 0.06  # each lip's thickness at the middle

# The warp, in the mouth's half-widths (corner to middle; 0.34 eye spans on a face like the training faces' and
# the astronaut's, where these were first measured in eye spans).
LOWER_LIP_DEPTH = (0.15, 0.8)  # the lower lip (the contours' depth under the lip line, held within these) moves with
# the lip line's profile ...
JAW_HALF_WIDTH = 1.8  # ... then the moving part widens to this half-width towards the chin
JAW_FULL_BELOW = 0.9  # down to this far below the lip line the jaw moves in full ...
JAW_STILL_BELOW = 2.35  # ... and from this far below it nothing moves (the neck, the collar)
# A photograph's jaw opens: the chin moves down with the lower lip (on faces like the test photos' it is 1.9-2.1
# half-widths below the lip line, where the cartoons' jaw fades out), nothing moving from this far below (the neck);
# the lips part as a lens (``_lens``: 0.82 of the middle's opening half way to a corner), where the cartoons' bell
# (``_bump``: 0.5 there) drew a photo's lower lip as a V stretched under a still chin.
PHOTO_JAW_FULL_BELOW, PHOTO_JAW_STILL_BELOW = 1.9, 3.1
PHOTO_JAW_HALF_WIDTH = 2.4  # ... and across the whole chin, to where the jaw's sides turn up (no kink at the sides)
LENS_POWER = 0.6
UPPER_FADE = 0.64  # the upper lip's rise fades out this far above the lip line (towards the nose)
LOWER_SHARE = 0.8  # of the opening: the lower lip and jaw move down by this share, the upper lip up by the rest
# The opening saturates towards this (a broken model frame must not tear the chin off; the gap's floor then stays
# within 0.35 mouth widths of the lip line, inside the lips' reach: avatargen eval's mouth spill)
MAX_OPENING_HALF_WIDTHS = 0.88  # (0.30 eye spans before, on a face like the training faces)
EDGE_HALF_WIDTHS = 0.075  # the interior's edge is feathered over this (at least a pixel) under the lips
# The lips' midline this far (half-widths) or more off the corners' midpoint: a turned face, whose opening and drawn
# teeth centre on it (the test photos read -0.05..+0.05, the astronaut's cylinder-warped turn among them; Grace Hopper
# turned as a real ~30-degree turn reads +0.16)
TURNED_MIDLINE = 0.08
CAVITY_SHADE = 0.3  # the cavity's tone: the reference's lip colour times this ...
CAVITY_LIGHTS = (0.7, 1.3)  # ... times this, from the model's darkest cavity pixels to its skin level (tongue, depth)
TEETH_COLOUR = (192.0, 187.0, 174.0)  # off-white in the mouth's shade, where the model draws teeth, or the
# reference's own teeth colour where its open lips show them (``mouth_interior.own_teeth``);
# pixels brighter than the model's skin by this share of the way from its grey to white: none .. all (a share,
# not a ratio to the skin's grey: on dark skin the lips' soft highlights pass 1.2x it and were drawn as teeth)
TEETH_LEVEL = (0.10, 0.40)
# With a ``SpeechDrive`` (photographs), the opening at the speech level before the saturation: 0.6 half-widths
# opens 0.23-0.27 mouth widths in speech (dlib's inner-lip gap, 90th percentile; benchmarks/quality/portrait_judge.py), as
# the model's reading did on the frontal test photos.
DRIVE_OPENING_HALF_WIDTHS = 0.6
# A photo whose own smile showed its teeth (closed before it is driven): its upper teeth under the upper lip, this
# share of the opening deep, at most this many half-widths.
UPPER_TEETH = (0.4, 0.22)
MIN_OPENING_PX = 0.05  # an opening below this many output pixels leaves the reference as it is
# Rounded lips (o, u, w: the ``SpeechDrive``'s roundness, 0 .. 1): the opened mouth drawn narrower, each pixel taken
# from up to ROUND_NARROWING farther along the mouth, in full out to its corners, falling smoothly to nothing at
# ROUND_REACH half-widths along it and ROUND_HEIGHT half-widths (plus half the opening) above and below the gap
# (at roundness 1 the mouth is a quarter narrower; the cheeks, the nose and the chin stay).
ROUND_NARROWING, ROUND_REACH, ROUND_HEIGHT = 0.35, 2.2, 1.1
_GREY = np.array(LUMA, np.float32)


class MouthCue(Enum):
    """What in a model frame shows its mouth open (see the module docstring)."""

    dark = "dark"  # a dark cavity: the bundled model's cartoon avatars
    colour = "colour"  # colours unlike the skin: the bundled model's photographs


# Output opening over the model's, at the model-to-output scale, for small openings, saturating (tanh) towards
# MAX_OPENING_HALF_WIDTHS. Chosen by the eval's sync confidence on 30 s of speech (docs/compositing.md): on avatar_1 the dark
# cue at gain 1.6 (a hard cap then) / 2.5 / 3.5 read 0.71 / 0.75 / 0.76, identity 0.144-0.149 throughout; the colour
# cue reads larger areas, and on the astronaut at 1.6 / 2.2 read 0.68 / 0.73 for identity p95 0.31 / 0.35.
OPENING_GAIN = {"dark": 3.5, "colour": 1.6}


class MouthReading(NamedTuple):
    """What ``mouth_opening`` read from (t,) model frames, in model pixels and grey levels."""

    opening: np.ndarray  # (t,) height of the dark cavity (0: closed)
    centre: np.ndarray  # (t, 2) x, y of the cavity's centre (the box's centre where there is none)
    skin: np.ndarray  # (t,) the skin's grey level around the mouth box
    cavity: np.ndarray  # (t,) the 10th percentile of the box's grey levels: its darkest


def mouth_opening(generated: np.ndarray, cue: MouthCue = MouthCue.dark, shut: np.ndarray | None = None) -> MouthReading:
    """How open the mouths of (t, S, S, 3) uint8 model frames are, read by ``cue`` (see the module docstring).

    ``shut`` (``MouthCue.dark``): (h, w) over the model's mouth box, what the reference's shut mouth already reads
    as teeth (``shut_mouth``), taken off each frame's teeth."""
    count, side = generated.shape[0], generated.shape[1]
    x0, y0, x1, y1 = (round(f * side) for f in MODEL_MOUTH_BOX)
    colour, bands, top = _mouth_rows(generated)
    grey = colour @ _GREY  # (t, rows, w)
    skin = _lower_median(np.concatenate([grey[:, rows].reshape(count, -1) for rows in bands], axis=1), axis=1)  # (t,)
    box = grey[:, y0 - top : y1 - top]  # (t, h, w)
    if cue == MouthCue.dark:
        high, low = CAVITY_LEVEL
        level = skin[:, None, None]
        cavity = np.clip((high * level - box) / np.maximum((high - low) * level, 1.0), 0.0, 1.0)  # (t, h, w)
        teeth = _teeth_cue(box, level)  # (t, h, w)
        if shut is not None:
            teeth = np.maximum(teeth - shut, 0.0)
        cavity = np.clip(cavity + teeth, 0.0, 1.0)
    else:
        hue = colour - grey[..., None]  # (t, rows, w, 3): colour with its grey taken out
        skin_hue = _lower_median(np.concatenate([hue[:, rows].reshape(count, -1, 3) for rows in bands], axis=1), axis=1)
        departure = np.linalg.norm(hue[:, y0 - top : y1 - top] - skin_hue[:, None, None], axis=-1)  # (t, h, w)
        start, full = COLOUR_DEPARTURE
        cavity = np.clip((departure - start) / (full - start), 0.0, 1.0)  # (t, h, w)
    area = cavity.sum(axis=(1, 2))  # (t,) model pixels
    opening = np.maximum(area - CLOSED_AREA * side * side, 0.0) / (CAVITY_WIDTH * side)  # (t,)
    xs, ys = np.arange(x0, x1, dtype=np.float32), np.arange(y0, y1, dtype=np.float32)[:, None]  # (w,), (h, 1)
    mass = np.maximum(area, np.float32(1e-6))
    centre = np.stack([(cavity * xs).sum(axis=(1, 2)) / mass, (cavity * ys).sum(axis=(1, 2)) / mass], axis=1)  # (t, 2)
    default = np.array([(x0 + x1 - 1) / 2, (y0 + y1 - 1) / 2], np.float32)
    centre = np.where((area > 1.0)[:, None], centre, default)
    darkest = np.quantile(box.reshape(count, -1), 0.1, axis=1)  # (t,)
    return MouthReading(opening, centre, skin, darkest)


def _unread(count: int, side: int) -> MouthReading:
    """What ``mouth_opening`` gives (t=``count``) frames of a (side, side) model it does not read: shut, centred."""
    x0, y0, x1, y1 = (round(f * side) for f in MODEL_MOUTH_BOX)
    centre = np.tile(np.array([(x0 + x1 - 1) / 2, (y0 + y1 - 1) / 2], dtype=np.float32), (count, 1))  # (t, 2)
    return MouthReading(np.zeros(count, np.float32), centre, np.zeros(count, np.float32), np.zeros(count, np.float32))


@dataclass(frozen=True)
class ModelMapping:
    """Where output pixel (x', y') falls in the model frame: model pixel = scale * output pixel + offset (x and y;
    pixel centres at integers in both)."""

    scale: tuple[float, float]
    offset: tuple[float, float]


class MouthWarp:
    """The mouth of ``background`` (H', W', 3) uint8, the output-sized reference, whose ``lips`` are known (output
    pixels: ``avatargen.face.lips``, or ``estimated_lips`` from the five landmarks), moved by the generated model
    frames; ``to_model`` maps output pixels to model pixels; ``cue`` is how their opening is read
    (``MouthCue.colour`` for a photograph); ``still`` the model's input square (the reference with its mouth shut),
    whose own teeth reading the dark cue takes off each frame's (``shut_mouth``).

    ``pasting(generated, frames)`` writes into the (t, H', W', 3) ``frames`` (the reference) the mouth of each
    (t, S, S, 3) generated frame, one at a time. Nothing is carried between calls.
    """

    def __init__(self, background: np.ndarray, lips: Lips, to_model: ModelMapping,
                 cue: MouthCue = MouthCue.dark, still: np.ndarray | None = None,
                 teeth_from: tuple[np.ndarray, Lips] | None = None):  # fmt: skip
        self.to_model = to_model
        self.cue = cue
        self.lips = lips
        self.drive: SpeechDrive | None = None  # set: the opening follows the speech (a photograph), not the model
        self.wants_speech = False  # the opening should follow the render's speech file where it has one
        self._shut = None if still is None else shut_mouth(still)  # (h, w) over the model's mouth box
        height, width = background.shape[:2]
        u, v = lips.along, lips.down
        half = float(max(lips.width / 2, 1.0))  # output pixels: the mouth's half-width
        self.half, self._u, self._v = half, u, v
        # The lip line: where the lower lip's inner edge is (closed lips: where they meet; a smile: under its teeth),
        # as spans along the mouth -> pixels below the corners' midpoint; and the lower lip's outer edge.
        split = _profile(lips.inner[:11], lips.centre, u, v, half)
        lower_edge = _profile(lips.outer[:11], lips.centre, u, v, half)
        centre_split = float(np.interp(0.0, *split))
        self.lip_centre = lips.centre + centre_split * v  # (2,) x, y: the lip line's middle
        lip_depth = float(np.clip(np.interp(0.0, *lower_edge) - centre_split, LOWER_LIP_DEPTH[0] * half,
                                  LOWER_LIP_DEPTH[1] * half))  # fmt: skip
        photo = cue == MouthCue.colour
        shape = _lens if photo else _bump  # how the lips part across the mouth
        full_below, still_below, self._jaw_half_width = (
            (PHOTO_JAW_FULL_BELOW, PHOTO_JAW_STILL_BELOW, PHOTO_JAW_HALF_WIDTH) if photo
            else (JAW_FULL_BELOW, JAW_STILL_BELOW, JAW_HALF_WIDTH))  # fmt: skip
        self._still_below = still_below
        self.box = self._moving_box(height, width)
        if self.box is None:
            return
        top, bottom, left, right = self.box
        self._xs, self._ys = np.arange(left, right, dtype=np.float32), np.arange(top, bottom, dtype=np.float32)
        self._box_x, self._box_y = (self._xs - left)[None, :], (self._ys - top)[:, None]  # (1, w), (h, 1) box pixels
        self._u32, self._v32, centre = u.astype(np.float32), v.astype(np.float32), lips.centre.astype(np.float32)
        offset_x, offset_y = self._xs[None, :] - centre[0], self._ys[:, None] - centre[1]  # (1, w), (h, 1)
        along_mouth = (offset_x * self._u32[0] + offset_y * self._u32[1]) / half  # (h, w): -1, 1 at the corners
        down = offset_x * self._v32[0] + offset_y * self._v32[1]  # (h, w) output pixels below the corners' midpoint
        split_at = np.interp(along_mouth, *split).astype(np.float32)  # (h, w)
        self._below = down - split_at  # (h, w) output pixels below the lip line
        below_lip = self._below / half  # (h, w) half-widths
        self._along = along_mouth
        # A turned face's opening, teeth and shading have their middle on its lips' midline (the mesh's middle points,
        # off the corners' midpoint), each side stretched to its own corner (the far one foreshortened).
        middle = float(np.median((lips.middles - lips.centre) @ u / half))
        middle = float(np.clip(middle, -0.5, 0.5)) if abs(middle) >= TURNED_MIDLINE else 0.0
        sides = np.where(along_mouth >= middle, np.float32(1.0 - middle), np.float32(1.0 + middle))  # (h, w) float32
        self._anatomy_along = (along_mouth - np.float32(middle)) / sides  # (h, w): -1, 1 at the corners, 0 mid
        self._lip_profile = shape(np.abs(self._anatomy_along))  # (h, w): 1 at the midline, 0 at the corners
        # (h, w): 0 down to the lower lip's edge (the lip keeps its thickness), 1 from where the jaw moves in full
        jaw = smoothstep((below_lip - lip_depth / half) / (full_below - lip_depth / half))
        half_width = 1.0 + (self._jaw_half_width - 1.0) * jaw
        fade = 1.0 - smoothstep((below_lip - full_below) / (still_below - full_below))
        across = np.abs(self._anatomy_along) / half_width
        if photo:  # the lips' lens gives way to a smooth fall-off across the chin (no crease at the jaw's sides)
            self._lower_profile = ((1.0 - jaw) * _lens(across) + jaw * _bump(across)) * fade  # (h, w)
        else:
            self._lower_profile = _bump(across) * fade  # (h, w)
        nose = smoothstep(1.0 + below_lip / UPPER_FADE)  # (h, w): 0 towards the nose, 1 at the lip line
        self._upper_profile = self._lip_profile * nose  # (h, w)
        self._patch = background[top:bottom, left:right].astype(np.float32)  # (h, w, 3)
        band = (np.abs(along_mouth) < 0.3) & (np.abs(below_lip) < 0.18) & (self._below < lip_depth)  # the lip line
        lips_colour = self._patch[band]  # (n, 3)
        lip_colour = _lower_median(lips_colour if len(lips_colour) else self._patch.reshape(-1, 3), axis=0)  # (3,)
        self._cavity_tone = lip_colour * CAVITY_SHADE  # (3,)
        seen = own_teeth(*(teeth_from or (background, lips)))  # (3,) or None: the picture shows no teeth
        self._teeth_colour = np.array(TEETH_COLOUR, np.float32) if seen is None else seen  # (3,)
        # a photograph's interior: its teeth, tongue and dark in its own colours (the model's is a smear there)
        self._anatomy = None
        if cue == MouthCue.colour:
            teeth = estimated_teeth(background, lips) if seen is None else seen
            self._anatomy = MouthInterior(teeth, lip_colour)
        # a cartoon closed before it is driven that showed its teeth shows them again under the upper lip as it opens
        self._upper_teeth = self._anatomy is None and teeth_from is not None and seen is not None
        self._edge = max(1.0, EDGE_HALF_WIDTHS * half)  # output pixels
        self._max_opening = MAX_OPENING_HALF_WIDTHS * half
        self._output_per_model = 2.0 / (abs(to_model.scale[0]) + abs(to_model.scale[1]))

    @property
    def reads_model(self) -> bool:
        """Whether ``pasting`` reads the model's frames: not where nothing moves (no ``box``), nor on a photograph
        driven by its speech (the opening from the ``drive``, the interior drawn: the render then runs no model)."""
        return self.box is not None and not (self.drive is not None and self._anatomy is not None)

    def openings(self, generated: np.ndarray, first: int | None = None) -> tuple[np.ndarray, MouthReading]:
        """(t,) how far the lips part in output pixels for (t, S, S, 3) model frames, and what was read from them;
        with a ``drive`` and ``first`` (the absolute index of the first frame), how far the speech opens them."""
        openings, reading, _ = self._shapes(generated, first)
        return openings, reading

    def _shapes(self, generated: np.ndarray, first: int | None) -> tuple[np.ndarray, MouthReading, np.ndarray]:
        """``openings`` and (t,) how round the lips are (0 without a ``drive``), the drive asked once."""
        if self.drive is not None and first is not None and self._anatomy is not None:  # nothing of the frame is read
            reading = _unread(generated.shape[0], generated.shape[1])
        else:
            reading = mouth_opening(generated, self.cue, self._shut if self.cue == MouthCue.dark else None)
        rounds = np.zeros(generated.shape[0])
        if self.drive is not None and first is not None:
            levels, rounds = self.drive.shapes(first, generated.shape[0])
            linear = levels * DRIVE_OPENING_HALF_WIDTHS * self.half
        else:
            linear = reading.opening * OPENING_GAIN[self.cue.value] * self._output_per_model
        return self._max_opening * np.tanh(linear / self._max_opening), reading, rounds

    def pasting(self, generated: np.ndarray, frames: np.ndarray, first: int | None = None) -> Iterator[int]:
        """Write the mouth of each of the (t, S, S, 3) ``generated`` frames into the (t, H', W', 3) ``frames`` (the
        reference, each), a frame at a time: yields each frame's index once its mouth is written (the speech is asked
        once for all of them); ``first``: the absolute index of the first (for the ``drive``)."""
        if self.box is None:
            yield from range(len(frames))
            return
        top, bottom, left, right = self.box
        openings, reading, rounds = self._shapes(generated, first)
        for i in range(len(frames)):
            if openings[i] >= MIN_OPENING_PX:
                levels = (float(reading.skin[i]), float(reading.cavity[i]))
                opened = self._open_mouth(generated[i], float(openings[i]), reading.centre[i], levels, float(rounds[i]))
                frames[i, top:bottom, left:right] = opened
            yield i

    def _open_mouth(self, generated: np.ndarray, opening: float, cavity_centre: np.ndarray,
                    levels: tuple[float, float], roundness: float = 0.0) -> np.ndarray:  # fmt: skip
        """The box with the lips parted by ``opening`` output pixels and the interior of ``generated`` (S, S, 3)
        between them (``levels``: its skin and cavity grey), narrowed by ``roundness`` -> (h, w, 3) uint8."""
        opening, roundness = float(opening), float(roundness)  # numpy float64s would make the maps float64
        down, up = LOWER_SHARE * opening, (1.0 - LOWER_SHARE) * opening
        below = self._below  # (h, w)
        lower = below >= 0.5 * (down - up) * self._lip_profile  # (h, w): the lower lip's side of the gap
        source = np.where(lower, below - down * self._lower_profile, below + up * self._upper_profile)
        depth = np.where(lower, -source, source)  # (h, w) output pixels into the gap (> 0: inside it)
        source = np.where(lower, np.maximum(source, 0.0), np.minimum(source, 0.0))
        moved = source - below  # (h, w) output pixels down the face that each pixel is taken from
        warped = cv2.remap(self._patch, self._box_x + moved * self._v32[0], self._box_y + moved * self._v32[1],
                           cv2.INTER_CUBIC, borderMode=cv2.BORDER_REPLICATE)  # (h, w, 3): the edge repeated past it
        inside = smoothstep(depth / self._edge)  # (h, w)
        rows, cols = np.nonzero(inside.max(axis=1) > 0)[0], np.nonzero(inside.max(axis=0) > 0)[0]
        if len(rows) == 0:
            return _to_uint8(self._narrowed(warped, roundness, 0.5 * (down - up), opening))
        gap = (slice(int(rows[0]), int(rows[-1]) + 1), slice(int(cols[0]), int(cols[-1]) + 1))  # the gap's bounding box
        if self._anatomy is not None:  # (gh, gw, 3)
            from_top = below[gap] + up * self._upper_profile[gap]  # output pixels under the upper lip's inner edge
            from_bottom = down * self._lower_profile[gap] - below[gap]  # ... over the lower lip's
            interior = self._anatomy.draw(from_top, from_bottom, self._anatomy_along[gap], opening, self.half)
        else:
            interior = self._interior(generated, self._xs[gap[1]], self._ys[gap[0]], 0.5 * (down - up), cavity_centre,
                                      levels)  # fmt: skip
        if self._upper_teeth:  # the upper teeth: a band under the upper lip, up to UPPER_TEETH of the gap deep
            reach = min(UPPER_TEETH[0] * opening, UPPER_TEETH[1] * self.half)
            band = (~lower[gap]) * _bump(depth[gap] / max(reach, 1.0)) * self._lip_profile[gap]  # (gh, gw)
            interior += smoothstep(2.0 * band)[..., None] * (self._teeth_colour - interior)
        warped[gap] += inside[gap][..., None] * (interior - warped[gap])
        return _to_uint8(self._narrowed(warped, roundness, 0.5 * (down - up), opening))

    def _narrowed(self, image: np.ndarray, roundness: float, gap_below: float, opening: float) -> np.ndarray:
        """The opened mouth ``image`` (h, w, 3) drawn narrower for rounded lips (see ``ROUND_NARROWING``); its gap's
        middle ``gap_below`` output pixels below the lip line."""
        if roundness * ROUND_NARROWING * self.half < 0.05:  # under a twentieth of a pixel at the corners
            return image
        height = ROUND_HEIGHT * self.half + 0.5 * opening  # output pixels
        along = _bump((np.abs(self._along) - 1.0) / (ROUND_REACH - 1.0))  # (h, w): 1 out to the corners
        weight = along * _bump(np.abs(self._below - gap_below) / height)  # (h, w)
        shift = (roundness * ROUND_NARROWING * self.half) * self._along * weight  # (h, w) output pixels along
        return cv2.remap(image, self._box_x + shift * self._u32[0], self._box_y + shift * self._u32[1],
                         cv2.INTER_CUBIC, borderMode=cv2.BORDER_REPLICATE)  # (h, w, 3)

    def _interior(self, generated: np.ndarray, xs: np.ndarray, ys: np.ndarray, gap_below: float,
                  cavity_centre: np.ndarray, levels: tuple[float, float]) -> np.ndarray:  # fmt: skip
        """The generated frame's mouth interior at output pixels ``xs`` (w,) by ``ys`` (h,), its cavity centre on the
        gap's, in a dark tone of the reference's lips (``levels``: the model's skin and cavity grey) -> (h, w, 3)."""
        (sx, sy), (ox, oy) = self.to_model.scale, self.to_model.offset
        gap = self.lip_centre + gap_below * self._v  # (2,) output pixels
        shift = np.asarray(cavity_centre) - np.array([sx * gap[0] + ox, sy * gap[1] + oy])  # model pixels
        scale, offset = np.array([sx, sy], np.float32), (np.array([ox, oy]) + shift).astype(np.float32)
        # Only the part of the model frame the points reach is converted (affine: its corners bound it).
        top, bottom, left, right = self.model_box(generated.shape[0])
        corners = np.array([[xs[0], ys[0]], [xs[-1], ys[-1]]]) * scale + offset  # (2, 2) x, y
        (x0, y0), (x1, y1) = np.floor(corners.min(axis=0)).astype(int), np.ceil(corners.max(axis=0)).astype(int) + 1
        x0, y0 = min(max(x0, left), right - 2), min(max(y0, top), bottom - 2)
        x1, y1 = max(min(x1, right), x0 + 2), max(min(y1, bottom), y0 + 2)
        image = generated[y0:y1, x0:x1].astype(np.float32)  # (y1 - y0, x1 - x0, 3)
        points = np.meshgrid(xs * scale[0] + offset[0] - np.float32(x0), ys * scale[1] + offset[1] - np.float32(y0))
        sampled = cv2.remap(image, *points, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)  # (h, w, 3)
        grey = sampled @ _GREY  # (h, w)
        skin, cavity = levels
        shade = np.clip((grey - cavity) / max(skin - cavity, 1.0), 0.0, 1.0)  # (h, w)
        low, high = CAVITY_LIGHTS
        dark = self._cavity_tone * (low + (high - low) * shade)[..., None]  # (h, w, 3)
        teeth = _teeth(grey, skin)[..., None]  # (h, w, 1)
        return dark + teeth * (self._teeth_colour - dark)

    @staticmethod
    def model_box(side: int) -> tuple[int, int, int, int]:
        """(y0, y1, x0, x1), end exclusive: every pixel of a (side, side) model frame ``pasting`` reads."""
        x0, y0, x1, y1 = MODEL_READ_BOX
        return int(y0 * side), math.ceil(y1 * side), int(x0 * side), math.ceil(x1 * side)

    def _moving_box(self, height: int, width: int) -> tuple[int, int, int, int] | None:
        """(top, bottom, left, right) of the output pixels the warp can change, clipped to the frame; None: none."""
        half, u, v = self.half, self._u, self._v
        corners = [self.lip_centre + half * (a * u + b * v)
                   for a in (-self._jaw_half_width, self._jaw_half_width)
                   for b in (-UPPER_FADE - 0.5, self._still_below)]  # fmt: skip
        xs, ys = [c[0] for c in corners], [c[1] for c in corners]
        top, bottom = max(0, math.floor(min(ys)) - 2), min(height, math.ceil(max(ys)) + 3)
        left, right = max(0, math.floor(min(xs)) - 2), min(width, math.ceil(max(xs)) + 3)
        return (top, bottom, left, right) if bottom > top + 1 and right > left + 1 else None


def _profile(points: np.ndarray, centre: np.ndarray, u: np.ndarray, v: np.ndarray,
             half: float) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """A lip edge as (along, down): ``points`` (n, 2) from one mouth corner to the other, as half-widths along the
    mouth from ``centre`` (increasing) and output pixels below it, for ``np.interp`` (flat past the corners)."""
    along = (points - centre) @ u / half
    down = (points - centre) @ v
    order = np.argsort(along)
    return along[order], down[order]


def estimated_lips(background: np.ndarray, layout: FaceLayout) -> Lips:
    """Closed lips where the five landmarks of ``layout`` (output pixels) put them, for a render without the lip
    finder (``avatargen[eval]`` not installed): the lip line looked for ``LIP_BELOW_NOSE`` eye spans below the nose
    and found on the reference's own lips (``_lip_line``), the corners ``MOUTH_HALF_WIDTH`` spans to each side."""
    span = max(float(np.linalg.norm(layout.points[0] - layout.points[2])), 1.0)  # outer corner to outer corner
    along = layout.eye_right - layout.eye_left
    u = along / max(float(np.linalg.norm(along)), 1e-6)  # (2,) along the mouth, to the image's right
    v = np.array([-u[1], u[0]])  # (2,) down the face
    centre = _lip_line(background, layout.nose + LIP_BELOW_NOSE * span * v, u, v, span)
    a = np.linspace(-1.0, 1.0, 11)[:, None]  # corner to corner
    thickness = ESTIMATED_LIP_THICKNESS * span * np.sqrt(1.0 - a**2)  # (11, 1)
    line = centre + a * MOUTH_HALF_WIDTH * span * u  # (11, 2)
    inner = np.concatenate([line, line[-2:0:-1]])  # (20, 2): lower edge, then upper, both on the line
    outer = np.concatenate([line + thickness * v, (line - thickness * v)[-2:0:-1]])  # (20, 2)
    return Lips(outer, inner)


def _lip_line(picture: np.ndarray, guess: np.ndarray, u: np.ndarray, v: np.ndarray, span: float) -> np.ndarray:
    """The middle of the lip line (x, y) of ``picture``: the middle of the band of rows near ``guess`` whose centre
    columns depart most in colour from the cheeks beside the mouth (closed lips: where they meet; a smile: the
    lower edge of its upper teeth, about); ``guess`` itself where nothing there departs. ``u``, ``v``: along the
    mouth and down the face; ``span``: the eye span in pixels."""

    def colours(along: np.ndarray, down: np.ndarray) -> np.ndarray:  # spans from the guess -> (..., 3) float
        return nearest_pixels(picture, guess + (along[..., None] * u + down[..., None] * v) * span)

    rows = np.arange(LIP_SEARCH[0] * span, LIP_SEARCH[1] * span + 1.0) / span  # spans, one pixel apart
    beside = np.meshgrid(np.r_[-0.6:-0.45:4j, 0.45:0.6:4j], np.linspace(-0.05, 0.2, 6))
    cheeks = column_median(colours(*beside).reshape(-1, 3))  # (3,)
    departure = np.linalg.norm(colours(*np.meshgrid(np.linspace(-0.12, 0.12, 7), rows)) - cheeks, axis=-1).mean(axis=1)
    strongest = int(np.argmax(departure))
    if departure[strongest] < LIP_DEPARTURE:
        return guess
    # The lips: the rows departing at least half as much as the strongest, joined across gaps of up to LIP_GAP rows.
    strong = np.nonzero(departure >= 0.5 * departure[strongest])[0]
    group = np.split(strong, np.nonzero(np.diff(strong) > LIP_GAP + 1)[0] + 1)
    lips = next(rows_ for rows_ in group if strongest in rows_)
    return guess + 0.5 * (rows[lips[0]] + rows[lips[-1]]) * span * v


def still_opening(square: np.ndarray) -> float:
    """How open ``MouthCue.dark`` reads the mouth of ``square`` (S, S, 3) uint8, the model's input (model pixels):
    over ``SHUT_OPENING_MAX`` where the reference is dark around its mouth already (a dark beard) or shows its mouth
    open (a smile with its teeth showing reads 21-25)."""
    return float(mouth_opening(square[None], MouthCue.dark, shut_mouth(square)).opening[0])


def shut_mouth(square: np.ndarray) -> np.ndarray:
    """(h, w) float32 in [0, 1] over the model's mouth box: what ``MouthCue.dark`` reads as teeth in ``square``
    (S, S, 3) uint8, the model's input (the reference, its mouth shut: pale lips, a pale backdrop under a short chin),
    grown by 2 pixels (the model's drawing of it moves a little)."""
    colour, bands, top = _mouth_rows(square[None])
    grey = colour @ _GREY  # (1, rows, w)
    skin = _lower_median(np.concatenate([grey[:, rows].reshape(1, -1) for rows in bands], axis=1), axis=1)  # (1,)
    y0, y1 = (round(f * square.shape[0]) for f in MODEL_MOUTH_BOX[1::2])
    teeth = _teeth_cue(grey[:, y0 - top : y1 - top], skin[:, None, None])  # (1, h, w)
    return cv2.dilate(teeth[0], np.ones((5, 5), np.uint8))  # (h, w): the max over 5x5, nothing from past the edge


def _mouth_rows(frames: np.ndarray) -> tuple[np.ndarray, list[slice], int]:
    """The rows of (t, S, S, 3) uint8 ``frames`` from the skin band above the model's mouth box to the one below it,
    across the box's columns, as (t, rows, w, 3) float32 (a copy: frames may be read-only); the skin bands' rows in
    them; and the first row's index in the frame."""
    side = frames.shape[1]
    x0, x1 = (round(f * side) for f in MODEL_MOUTH_BOX[0::2])
    top, bottom = int(MODEL_SKIN_BANDS[0][0] * side), int(MODEL_SKIN_BANDS[1][1] * side)
    bands = [slice(int(a * side) - top, int(b * side) - top) for a, b in MODEL_SKIN_BANDS]
    return frames[:, top:bottom, x0:x1].astype(np.float32), bands, top


def _lower_median(values: np.ndarray, axis: int) -> np.ndarray:
    """The median along ``axis``, of an even count the lower of the middle two (as torch.median took it)."""
    middle = (values.shape[axis] - 1) // 2
    return np.take(np.partition(values, middle, axis=axis), middle, axis=axis)


def _teeth_cue(grey: np.ndarray, skin: np.ndarray) -> np.ndarray:
    """(t, h, w) in [0, 1]: how much each pixel of ``grey`` (t, h, w) looks like teeth against the ``skin`` grey
    (t, 1, 1): brighter than the skin (``TEETH_CUE_LEVEL``; the model's teeth are tinted, not white)."""
    start, full = TEETH_CUE_LEVEL
    return np.clip((grey / np.maximum(skin, 1.0) - start) / (full - start), 0.0, 1.0)


def _teeth(grey: np.ndarray, skin: float) -> np.ndarray:
    """(h, w) in [0, 1]: how much of ``grey`` the interior draws as teeth: its share of the way from the ``skin``
    grey to white, through ``TEETH_LEVEL``."""
    share = (grey - skin) / max(255.0 - skin, 1.0)
    return smoothstep((share - TEETH_LEVEL[0]) / (TEETH_LEVEL[1] - TEETH_LEVEL[0]))


def _bump(x: np.ndarray) -> np.ndarray:
    """1 at 0, falling smoothly (zero slope at both ends) to 0 at 1 and beyond."""
    return 1.0 - smoothstep(x)


def _lens(x: np.ndarray) -> np.ndarray:
    """1 at 0, falling as a lens's edge (``LENS_POWER`` of 1 - x^2: steep at the end) to 0 at 1 and beyond."""
    return np.maximum(1.0 - x * x, 0.0) ** LENS_POWER


def _to_uint8(image: np.ndarray) -> np.ndarray:
    """(h, w, 3) float -> (h, w, 3) uint8, rounded."""
    return np.clip(image + 0.5, 0, 255).astype(np.uint8)
