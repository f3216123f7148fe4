"""``MouthInterior``: what a photograph's open mouth shows between its parted lips, drawn in the picture's own
colours: the upper teeth under the upper lip, the tongue behind the lower lip once the jaw drops far enough, the
mouth's dark between them.

Everything is placed in the gap the warp opened, per pixel by its distance from the moved upper lip's inner edge
(``from_top``) and from the lower lip's (``from_bottom``), so the teeth's edge and the tongue's follow the lips'
curve and both narrow to nothing at the corners, where the gap does. The colours come from the reference: its own
teeth where its open lips showed them (``own_teeth``), else teeth estimated from the skin of the cheeks beside the
nose (``cheek_skin``: not the mouth's sides, which a beard may cover; ``TEETH_OVER_SKIN`` its grey, a little of its
tint): an underexposed photo gets dim teeth, a greyscale one grey teeth; the tongue and the dark are shades of its
lips.
"""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw

from avatargen.face.lips import Lips
from avatargen.numeric import LUMA, column_median, nearest_pixels, smoothstep

_GREY = np.array(LUMA)

# The upper teeth show this share of the gap under the upper lip, at most this many mouth half-widths (an incisor
# is about a fifth of the mouth's width tall); darker towards the corners (the cheeks' shadow) by up to
# CORNER_SHADOW, and just under the lip (its shadow) by LIP_SHADOW.
TEETH_SHARE, TEETH_MAX_HALF_WIDTHS = 0.42, 0.3
CORNER_SHADOW, LIP_SHADOW = 0.55, 0.2
TEETH_ARCH = 0.3  # the teeth's edge rises towards the corners by this share of their depth (the arch)
# Where one tooth meets the next, in half-widths from the middle (the incisors' and canines' widths on a mouth
# about 50 mm wide, foreshortened along the arch), the last tooth reaching the corner: each tooth's own edge, its
# corners rounded up by TOOTH_ROUND of its depth (where one flat band was notched by a regular line), a faint shade
# TOOTH_GAP_SHADE darker where two meet, and each a little darker than the one before it (TOOTH_SHADES: the arch
# turns them from the light).
TOOTH_BOUNDS = (0.0, 0.32, 0.56, 0.74, 0.88, 1.0)
TOOTH_ROUND, TOOTH_GAP_SHADE = 0.22, 0.12
TOOTH_SHADES = (1.0, 0.95, 0.9, 0.84, 0.8)
# The tongue rises behind the lower lip to this share of the gap, from none at the first opening (mouth
# half-widths) to all of it at the second: small openings show teeth and dark only.
TONGUE_SHARE, TONGUE_OPENINGS = 0.3, (0.25, 0.7)
TONGUE_SHADE, TONGUE_BACK = 0.5, 0.5  # the tongue: the lips' colour times this, darker to this at its back edge
CAVITY_SHADE = 0.28  # the mouth's dark: the lips' colour times this
# Teeth the picture does not show: this times the grey of the cheeks (skimage's astronaut: her own teeth 1.18 times
# the skin beside her mouth, 1.22 times her cheeks', in the mouth's shade), in the picture's grade (``picture_grade``:
# a sepia print's teeth are sepia, where they were drawn grey-lilac on it) and this share of the cheeks' tint over it.
TEETH_OVER_SKIN, TEETH_TINT = 1.12, 0.3
GRADE_SHARE, GRADE_GREY = 0.05, (60.0, 235.0)  # the picture's least coloured pixels (this share, in this grey range)
# The picture's own teeth: at least OWN_TEETH_PIXELS inside its open lips brighter than the cheeks by
# OWN_TEETH_BRIGHTER and paler (chroma over grey) than OWN_TEETH_PALER of their skin's (+ 0.05 for grey skin).
OWN_TEETH_PIXELS, OWN_TEETH_BRIGHTER, OWN_TEETH_PALER = 12, 1.05, 0.8
_TOOTH_BOUNDS, _TOOTH_SHADES = np.array(TOOTH_BOUNDS, np.float32), np.array(TOOTH_SHADES, np.float32)


class MouthInterior:
    """The interior of a photograph's open mouth, in ``teeth``, ``lip`` colours (3,) (grey levels)."""

    def __init__(self, teeth: np.ndarray, lip: np.ndarray):
        self.teeth = np.asarray(teeth, np.float32)
        self.tongue = np.asarray(lip, np.float32) * TONGUE_SHADE
        self.cavity = np.asarray(lip, np.float32) * CAVITY_SHADE

    def draw(self, from_top: np.ndarray, from_bottom: np.ndarray, along: np.ndarray, opening: float,
             half: float) -> np.ndarray:  # fmt: skip
        """(h, w, 3) float32 colours of the gap at pixels ``from_top`` / ``from_bottom`` output pixels under the upper
        lip's inner edge / over the lower lip's (h, w), ``along`` the mouth in half-widths (-1, 1 at the corners), for
        an opening of ``opening`` output pixels at the middle of a mouth ``half`` output pixels wide each side."""
        half = float(half)  # a numpy float64 would promote the float32 arrays
        gap = np.maximum(from_top + from_bottom, np.float32(1e-3))  # (h, w) the gap's height in this column
        corner = (1.0 - CORNER_SHADOW * smoothstep((np.abs(along) - 0.35) / 0.6))[..., None]  # (h, w, 1)
        teeth_depth = np.minimum(TEETH_SHARE * gap, np.float32(TEETH_MAX_HALF_WIDTHS * half))
        a = np.minimum(np.abs(along), _TOOTH_BOUNDS[-1] - np.float32(1e-6))  # (h, w)
        tooth = np.clip(np.searchsorted(_TOOTH_BOUNDS, a, side="right") - 1, 0, len(TOOTH_SHADES) - 1)  # (h, w)
        left, right = _TOOTH_BOUNDS[tooth], _TOOTH_BOUNDS[tooth + 1]
        across = (2.0 * (a - left) / (right - left) - 1.0) ** 4  # (h, w): 0 at a tooth's middle, 1 at its sides
        to_bound = np.minimum(a - left, right - a) * half  # (h, w) pixels to the tooth's nearer side
        seam = np.exp(-((to_bound / 0.7) ** 2))  # (h, w): 1 on a side, none a pixel or so away
        teeth_depth = teeth_depth * (1.0 - TEETH_ARCH * along**2) * (1.0 - TOOTH_ROUND * across)
        teeth = smoothstep(teeth_depth - from_top + 0.5)  # (h, w): a one-pixel edge
        lip_shadow = 1.0 - LIP_SHADOW * (1.0 - smoothstep(from_top / (0.35 * np.maximum(teeth_depth, np.float32(1)))))
        low, high = TONGUE_OPENINGS
        tongue_height = TONGUE_SHARE * gap * float(smoothstep(np.float32((opening / half - low) / (high - low))))
        tongue = smoothstep((tongue_height - from_bottom) / 1.5 + 0.5)  # (h, w): a softer edge
        back = np.clip(from_bottom / np.maximum(tongue_height, np.float32(1e-3)), 0.0, 1.0)  # (h, w): 0 front, 1 back
        colour = self.cavity * corner  # (h, w, 3)
        tongue_colour = self.tongue * (1.0 - (1.0 - TONGUE_BACK) * back)[..., None] * corner
        colour = colour + tongue[..., None] * (tongue_colour - colour)
        shade = _TOOTH_SHADES[tooth] * (1.0 - TOOTH_GAP_SHADE * seam)  # (h, w)
        teeth_colour = self.teeth * corner * lip_shadow[..., None] * shade[..., None]
        return colour + teeth[..., None] * (teeth_colour - colour)


def cheek_skin(picture: np.ndarray, lips: Lips) -> np.ndarray:
    """(3,) the median colour of the cheeks beside the nose, above the mouth of ``lips`` (1.1-1.7 half-widths to
    either side of its middle, 1.2-2.0 above it): skin on a bearded face too, which the mouth's sides are not."""
    half = max(lips.width / 2, 1.0)
    along, down = np.meshgrid(np.r_[-1.7:-1.1:5j, 1.1:1.7:5j], np.linspace(-2.0, -1.2, 5))
    points = lips.centre + half * (along[..., None] * lips.along + down[..., None] * lips.down)  # (5, 10, 2)
    return column_median(nearest_pixels(picture, points).reshape(-1, 3))


def own_teeth(picture: np.ndarray, lips: Lips) -> np.ndarray | None:
    """(3,) the median colour of the teeth ``picture``'s open ``lips`` show (see ``OWN_TEETH_PIXELS``), or None."""
    height, width = picture.shape[:2]
    x0, y0 = np.maximum(np.floor(lips.inner.min(axis=0)).astype(int), 0)
    x1, y1 = np.ceil(lips.inner.max(axis=0)).astype(int) + 1
    x1, y1 = min(x1, width), min(y1, height)
    if x1 - x0 < 2 or y1 - y0 < 2:
        return None
    mask = Image.new("L", (x1 - x0, y1 - y0), 0)
    ImageDraw.Draw(mask).polygon([(x - x0, y - y0) for x, y in lips.inner], fill=1)
    pixels = picture[y0:y1, x0:x1][np.asarray(mask, bool)].astype(np.float64)  # (n, 3)
    skin = cheek_skin(picture, lips)
    skin_grey = max(float(skin @ _GREY), 1.0)
    grey = pixels @ _GREY  # (n,)
    chroma = (pixels.max(axis=1) - pixels.min(axis=1)) / np.maximum(grey, 1.0)
    skin_chroma = float(skin.max() - skin.min()) / skin_grey
    pale = pixels[(grey > OWN_TEETH_BRIGHTER * skin_grey) & (chroma < OWN_TEETH_PALER * skin_chroma + 0.05)]
    return column_median(pale).astype(np.float32) if len(pale) >= OWN_TEETH_PIXELS else None


def picture_grade(picture: np.ndarray) -> np.ndarray:
    """(3,) the tint of ``picture``'s light (each channel over the grey): the median tint of its least coloured
    pixels (``GRADE_SHARE`` of those within ``GRADE_GREY``): about (1, 1, 1) where something in it is white or grey,
    the print's own tint on a sepia or toned photograph."""
    step = max(1, int(np.sqrt(picture.shape[0] * picture.shape[1] / 65536)))  # about 256x256 samples are plenty
    pixels = picture[::step, ::step].reshape(-1, 3).astype(np.float64)
    grey = pixels @ _GREY
    lit = (grey >= GRADE_GREY[0]) & (grey <= GRADE_GREY[1])
    pixels, grey = pixels[lit], grey[lit]
    if len(pixels) < 16:
        return np.ones(3)
    chroma = (pixels.max(axis=1) - pixels.min(axis=1)) / grey
    least = chroma <= np.quantile(chroma, GRADE_SHARE)
    return column_median(pixels[least] / grey[least, None])


def estimated_teeth(picture: np.ndarray, lips: Lips) -> np.ndarray:
    """(3,) teeth in the light of ``picture``'s mouth, for a picture that shows none (see ``TEETH_OVER_SKIN``)."""
    skin = cheek_skin(picture, lips)
    grey = max(float(skin @ _GREY), 1.0)
    grade = picture_grade(picture)
    tint = grade * (1.0 + TEETH_TINT * (skin / grey / grade - 1.0))  # (3,)
    return np.clip(TEETH_OVER_SKIN * grey * tint, 0.0, 240.0).astype(np.float32)
