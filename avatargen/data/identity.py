"""Who is on screen: a procedural cartoon person described by a few dozen numbers, a pure function of a seed.

Geometry is in head units: the face is centred at the origin, x to the right, y down, and the face half-height is
about 1 head unit. The renderer scales head units to pixels (``FaceRenderer``), so an identity renders at any size.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

RGB = tuple[int, int, int]

HAIR_STYLES = ("short", "long", "bun", "bald", "curly")
COLLAR_STYLES = ("crew", "v", "shirt", "turtleneck")
BACKGROUND_STYLES = ("gradient", "stripes", "dots", "vignette")

# Skin tones from very light to very dark (sRGB), interpolated between neighbours for a continuous range.
_SKIN_TONES = np.array(
    [(255, 224, 200), (241, 194, 160), (224, 172, 130), (198, 140, 100), (166, 110, 75), (128, 82, 54), (92, 58, 38),
     (66, 42, 30)],
    dtype=np.float64,
)
_HAIR_COLOURS = np.array(
    [(20, 16, 14), (45, 30, 22), (80, 50, 30), (120, 80, 45), (170, 120, 70), (220, 190, 130), (150, 60, 30),
     (200, 200, 200), (110, 105, 100)],
    dtype=np.float64,
)
_IRIS_COLOURS = np.array([(70, 45, 25), (110, 70, 35), (60, 100, 150), (80, 120, 80), (120, 110, 60), (40, 30, 25)],
                         dtype=np.float64)


@dataclass(frozen=True)
class Identity:
    """Every appearance parameter of one synthetic person (head units, see the module docstring; colours sRGB)."""

    # face shape
    face_width: float  # half-width of the cheeks
    face_height: float  # half-height from forehead to chin
    jaw_width: float  # half-width at the jaw corners, as a fraction of face_width
    chin: float  # chin pointiness: 0 round, 1 pointed
    skin: RGB
    ear_size: float
    # hair
    hair_style: str
    hair_colour: RGB
    hair_volume: float  # how far hair stands off the skull
    fringe: float  # how low the hairline comes on the forehead (0 high, 1 low)
    # eyes and brows
    eye_size: float
    eye_spacing: float  # half-distance between eye centres
    eye_height: float  # y of the eye centres (negative: above the face centre)
    iris: RGB
    brow_thickness: float
    brow_angle: float  # radians, positive: outer end higher
    brow_colour: RGB
    # nose and mouth
    nose_length: float
    nose_width: float
    lip_colour: RGB
    lip_thickness: float
    mouth_width: float  # half-width of the closed mouth
    mouth_y: float
    # extras
    glasses: bool
    beard: bool
    blush: float  # 0..1 cheek tint strength
    # body and background
    clothing: RGB
    collar: str
    background_style: str
    background_a: RGB
    background_b: RGB
    head_scale: float  # head size as a fraction of the image height


def _mix(palette: np.ndarray, u: float) -> np.ndarray:
    """Linear interpolation along a palette at u in [0, 1]."""
    x = u * (len(palette) - 1)
    i = min(int(x), len(palette) - 2)
    return palette[i] + (x - i) * (palette[i + 1] - palette[i])


def _rgb(c: np.ndarray) -> RGB:
    c = np.clip(np.round(c), 0, 255).astype(int)
    return int(c[0]), int(c[1]), int(c[2])


def _hsv(rng: np.random.Generator, s: tuple[float, float], v: tuple[float, float]) -> RGB:
    """A random colour of any hue with saturation and value in the given ranges."""
    h, sat, val = rng.uniform(0, 1), rng.uniform(*s), rng.uniform(*v)
    k = (np.array([5.0, 3.0, 1.0]) + h * 6) % 6
    c = val - val * sat * np.clip(np.minimum(k, 4 - k), 0, 1)
    return _rgb(c * 255)


def sample_identity(rng: np.random.Generator) -> Identity:
    """Draw one person: every field varies independently within a range that still looks like a plausible face."""
    skin = _mix(_SKIN_TONES, rng.uniform(0, 1)) * rng.uniform(0.96, 1.04, 3)
    dark_skin = skin.mean() < 130
    hair_u = rng.uniform(0, 0.55) if dark_skin and rng.uniform() < 0.8 else rng.uniform(0, 1)
    hair = _mix(_HAIR_COLOURS, hair_u)
    if rng.uniform() < 0.05:  # dyed hair now and then
        hair = np.array(_hsv(rng, (0.5, 0.8), (0.4, 0.8)), dtype=np.float64)
    lip = skin * np.array([0.82, 0.58, 0.58]) + np.array([30.0, 0.0, 5.0]) * rng.uniform(0.3, 1.2)
    if rng.uniform() < 0.25:  # lipstick
        lip = np.array([rng.uniform(150, 210), rng.uniform(20, 70), rng.uniform(40, 90)])
    style = str(rng.choice(HAIR_STYLES, p=[0.32, 0.28, 0.12, 0.1, 0.18]))
    bg_a = np.array(_hsv(rng, (0.1, 0.5), (0.55, 0.95)), dtype=np.float64)
    bg_b = bg_a * rng.uniform(0.6, 0.9) + rng.uniform(-20, 20, 3)
    return Identity(
        face_width=rng.uniform(0.70, 0.86),
        face_height=rng.uniform(0.95, 1.08),
        jaw_width=rng.uniform(0.55, 0.85),
        chin=rng.uniform(0.0, 1.0),
        skin=_rgb(skin),
        ear_size=rng.uniform(0.16, 0.24),
        hair_style=style,
        hair_colour=_rgb(hair),
        hair_volume=rng.uniform(0.06, 0.2),
        fringe=rng.uniform(0.0, 1.0),
        eye_size=rng.uniform(0.15, 0.2),
        eye_spacing=rng.uniform(0.28, 0.36),
        eye_height=rng.uniform(-0.2, -0.08),
        iris=_rgb(_mix(_IRIS_COLOURS, rng.uniform(0, 1))),
        brow_thickness=rng.uniform(0.035, 0.08),
        brow_angle=rng.uniform(-0.12, 0.2),
        brow_colour=_rgb(hair * 0.8 if hair.mean() < 180 else hair * 0.6),
        nose_length=rng.uniform(0.2, 0.32),
        nose_width=rng.uniform(0.09, 0.15),
        lip_colour=_rgb(lip),
        lip_thickness=rng.uniform(0.045, 0.085),
        mouth_width=rng.uniform(0.22, 0.3),
        mouth_y=rng.uniform(0.44, 0.54),
        glasses=bool(rng.uniform() < 0.15),
        beard=bool(rng.uniform() < 0.12),
        blush=rng.uniform(0.0, 1.0) ** 2,
        clothing=_hsv(rng, (0.2, 0.9), (0.2, 0.9)),
        collar=str(rng.choice(COLLAR_STYLES)),
        background_style=str(rng.choice(BACKGROUND_STYLES)),
        background_a=_rgb(bg_a),
        background_b=_rgb(bg_b),
        head_scale=rng.uniform(0.28, 0.33),
    )


def identity_from_seed(seed: int) -> Identity:
    """The identity of ``seed``: a pure function (same seed, same person on every machine).

    Seeds < 100_000 are the training pool; seeds >= 1_000_000 are held out for examples and evaluation.
    """
    return sample_identity(np.random.default_rng([int(seed), 0x1D]))
