"""Reference pictures for the lip tests and benchmarks/quality/lip_contours.py, made from what ships offline.

Real photographs: skimage's astronaut (Eileen Collins, public domain: a smile that shows her teeth) and matplotlib's
Grace Hopper (closed lips). From them, by affine warps and pasting: a tilted head, a small face in a half-body
picture, two people in one picture, a picture turned on its side, a hand over the mouth and a mask. And a render of
the project's own synthetic faces (``avatargen.data``), smiling with its teeth showing.
"""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from avatargen.data.identity import identity_from_seed
from avatargen.data.pose import FacePose
from avatargen.data.render import FaceRenderer
from tests.eval.clips import astronaut, grace_hopper

ASTRONAUT_MOUTH = (224, 146)  # (x, y) centre of the astronaut's mouth, her own pixels
ASTRONAUT_FACE = (222, 128)  # ... and of her face


def tilted(degrees: float = 20.0) -> np.ndarray:
    """(512, 512, 3): the astronaut, her head (and the whole picture) turned by ``degrees`` about her face."""
    image = Image.fromarray(astronaut())
    return np.asarray(image.rotate(degrees, Image.Resampling.BICUBIC, center=ASTRONAUT_FACE, fillcolor=(96, 96, 104)))


def web_palette() -> np.ndarray:
    """(512, 512, 3): the astronaut through Pillow's default ``convert("P")`` (the 216-colour web palette, dithered:
    neighbouring pixels alternate between palette colours)."""
    return np.asarray(Image.fromarray(astronaut()).convert("P").convert("RGB"))


def half_body(scale: float = 0.5) -> np.ndarray:
    """(720, 560, 3): the astronaut scaled by ``scale`` in a larger picture, below a plain wall: a small face."""
    small = Image.fromarray(astronaut()).resize((round(512 * scale),) * 2, Image.Resampling.LANCZOS)
    canvas = Image.new("RGB", (560, 720), (182, 176, 164))
    canvas.paste(small, (560 // 2 - round(ASTRONAUT_FACE[0] * scale), 720 - small.height))
    return np.asarray(canvas)


def two_people() -> np.ndarray:
    """(600, 1024, 3): the astronaut on the left (her face 87 px wide) and Grace Hopper on the right (larger)."""
    canvas = Image.new("RGB", (1024, 600), (120, 120, 120))
    canvas.paste(Image.fromarray(astronaut()), (0, 44))
    canvas.paste(Image.fromarray(grace_hopper()), (512, 0))
    return np.asarray(canvas)


def on_its_side() -> np.ndarray:
    """The astronaut turned a quarter turn clockwise, as a camera without an orientation tag saves a portrait."""
    return np.ascontiguousarray(np.rot90(astronaut(), k=-1))


def hand_over_mouth() -> np.ndarray:
    """The astronaut with her mouth under a skin-coloured hand (her own cheek, stretched over it)."""
    image = Image.fromarray(astronaut())
    hand = image.crop((186, 120, 208, 140)).resize((120, 64), Image.Resampling.BICUBIC).filter(ImageFilter.GaussianBlur(2))
    mask = Image.new("L", hand.size, 0)
    ImageDraw.Draw(mask).ellipse((0, 0, hand.width - 1, hand.height - 1), fill=255)
    image.paste(hand, (ASTRONAUT_MOUTH[0] - 60, ASTRONAUT_MOUTH[1] - 28), mask.filter(ImageFilter.GaussianBlur(3)))
    return np.asarray(image)


def masked() -> np.ndarray:
    """The astronaut wearing a pale blue mask from her nose to her chin."""
    image = Image.fromarray(astronaut())
    draw = ImageDraw.Draw(image)
    draw.polygon([(176, 128), (270, 128), (262, 176), (222, 196), (184, 176)], fill=(150, 186, 206))
    for y in (142, 156, 170):  # pleats
        draw.line([(186, y), (258, y)], fill=(128, 164, 186), width=2)
    return np.asarray(image)


def bearded() -> np.ndarray:
    """Grace Hopper with a full dark beard and moustache painted around her lips (hair-like noise), her lips bare."""
    from avatargen.face.choice import reference_lips
    from avatargen.face.detector import shared_detector

    picture = grace_hopper()
    lips = reference_lips(picture, shared_detector().find(picture)).lips
    half, centre, u, v = lips.width / 2, lips.centre, lips.along, lips.down
    ring = [centre + half * (2.0 * np.cos(t) * u + (2.5 if np.sin(t) > 0 else 0.9) * np.sin(t) * v)
            for t in np.linspace(0, 2 * np.pi, 48)]  # from under the nose to below the chin
    mask = Image.new("L", picture.shape[1::-1], 0)
    ImageDraw.Draw(mask).polygon([tuple(p) for p in ring], fill=255)
    ImageDraw.Draw(mask).polygon([tuple(p) for p in lips.outer], fill=0)
    weight = np.asarray(mask.filter(ImageFilter.GaussianBlur(2)), np.float64)[..., None] / 255.0
    noise = np.random.default_rng(0).normal(0.0, 18.0, picture.shape[:2])
    hair = np.clip(np.array([70.0, 52.0, 40.0]) + noise[..., None], 0, 255).astype(np.uint8)
    hair = np.asarray(Image.fromarray(hair).filter(ImageFilter.GaussianBlur(0.7)), np.float64)
    return (picture * (1.0 - weight) + hair * weight).astype(np.uint8)


def smiling_render(size: int = 384, seed: int = 7) -> np.ndarray:
    """(size, size, 3): one of the project's synthetic faces smiling, its mouth a little open over its teeth."""
    frame, _ = FaceRenderer(identity_from_seed(seed), size=size).render(FacePose(smile=0.8, mouth_open=0.3))
    return np.ascontiguousarray(frame)


def stylised_3d(size: int = 512, seed: int = 11) -> np.ndarray:
    """(size, size, 3): a stylised 3-D cartoon: one of the project's synthetic faces grinning open, shaded as a lit
    sphere with a highlight, softened, with a fine grain (no flat fills left: the photo test takes it for a
    photograph's shading at 0.50 flat share, against 0.44-0.80 for flat cartoons)."""
    frame, _ = FaceRenderer(identity_from_seed(seed), size=size).render(FacePose(smile=0.9, mouth_open=0.6))
    rgb = np.asarray(Image.fromarray(np.ascontiguousarray(frame)).filter(ImageFilter.GaussianBlur(1.2))).astype(float)
    ys, xs = np.mgrid[0:size, 0:size] / size
    nx, ny = (xs - 0.5) / 0.42, (ys - 0.48) / 0.5
    nz = np.sqrt(np.clip(1.0 - nx**2 - ny**2, 0.02, 1.0))
    light = np.array([-0.4, -0.5, 0.77]) / np.linalg.norm([-0.4, -0.5, 0.77])
    lambert = np.clip(nx * light[0] + ny * light[1] + nz * light[2], 0.0, 1.0)  # (size, size)
    shaded = rgb * (0.55 + 0.55 * lambert)[..., None] + 60.0 * (lambert**30)[..., None]
    shaded += np.random.default_rng(0).normal(0.0, 1.5, shaded.shape)
    return np.clip(shaded, 0, 255).astype(np.uint8)


def yawed(rgb: np.ndarray, centre: tuple[int, int], radius: float, degrees: float) -> np.ndarray:
    """``rgb`` with the head around ``centre`` turned by ``degrees`` about a vertical axis, as a cylinder of
    ``radius`` pixels: a point at angle phi on it (x = r sin phi) shows at r sin(phi + yaw); beyond the cylinder the
    shift fades out over another radius."""
    height, width = rgb.shape[:2]
    yaw = np.radians(degrees)
    x = (np.arange(width) - centre[0]) / radius  # output columns in radii
    inside = np.clip(x, -0.999, 0.999)
    source = np.sin(np.arcsin(inside) - yaw)  # where each output column comes from, in radii
    edge = np.where(x > 0, np.sin(np.arcsin(0.999) - yaw) - 0.999, np.sin(np.arcsin(-0.999) - yaw) + 0.999)
    fade = np.clip(2.0 - np.abs(x), 0.0, 1.0)  # 1 within a radius, 0 two radii out
    source = np.where(np.abs(x) < 0.999, source, x + edge * fade)
    ys = np.arange(height) - centre[1]
    rows = np.clip(1.0 - (np.abs(ys) / (1.6 * radius)) ** 4, 0.0, 1.0)[:, None]  # (H, 1): the head's rows only
    src_x = centre[0] + radius * (x[None] + rows * (source[None] - x[None]))  # (H, W)
    from scipy.ndimage import map_coordinates

    grid_y = np.broadcast_to(np.arange(height)[:, None], (height, width)).astype(np.float64)
    return np.stack([map_coordinates(rgb[..., c].astype(np.float64), [grid_y, src_x], order=3, mode="nearest")
                     for c in range(3)], axis=-1).clip(0, 255).astype(np.uint8)  # fmt: skip


def opened_mouth(rgb: np.ndarray, pixels: float) -> np.ndarray:
    """``rgb`` with its mouth opened ``pixels`` by the project's own warp (the lips parted over a dark interior)."""
    from avatargen.compose.mouth_warp import ModelMapping, MouthCue, MouthWarp
    from avatargen.face.choice import reference_lips
    from avatargen.face.detector import shared_detector

    face = shared_detector().find(rgb)
    lips = reference_lips(rgb, face).lips
    warp = MouthWarp(rgb, lips, ModelMapping((1.0, 1.0), (0.0, 0.0)), MouthCue.dark)
    model = np.zeros((256, 256, 3), np.uint8)
    top, bottom, left, right = warp.box
    out = rgb.copy()
    out[top:bottom, left:right] = warp._open_mouth(model, pixels, np.array([128.0, 150.0]), (200.0, 20.0))
    return out


def screaming() -> np.ndarray:
    """Grace Hopper mid-scream: her mouth opened 30 px by the warp, its inside recoloured as a dark red palate above
    a pink tongue (as pink as a lip, where the face mesh's inner contour stops short of the lips)."""
    picture = opened_mouth(grace_hopper(), 30.0)
    grey = picture.astype(np.float64) @ np.array([0.299, 0.587, 0.114])
    inside = np.zeros(grey.shape, bool)
    inside[250:330, 200:310] = grey[250:330, 200:310] < 60  # the opened mouth's dark
    rows = np.nonzero(inside)[0]
    share = np.clip(1.6 * (rows - rows.min()) / max(rows.max() - rows.min(), 1) - 0.5, 0.0, 1.0)[:, None]
    palate, tongue = np.array([110.0, 40.0, 45.0]), np.array([190.0, 90.0, 100.0])
    out = picture.copy()
    out[inside] = np.clip(palate + share * (tongue - palate), 0, 255).astype(np.uint8)
    return out


def sepia(picture: np.ndarray, tint: tuple[float, float, float] = (1.12, 0.97, 0.74)) -> np.ndarray:
    """``picture`` printed in sepia: its grey times ``tint``."""
    grey = picture.astype(np.float64) @ np.array([0.299, 0.587, 0.114])
    return np.clip(grey[..., None] * np.array(tint), 0, 255).astype(np.uint8)


def long_lashes(seed: int = 0) -> np.ndarray:
    """(512, 512, 3): the astronaut's face at twice her size (her eyes 34 px wide) wearing long mascara'd upper
    lashes: along each upper lid (dlib's 68 landmarks), ~56 thin dark strokes that taper and curl upward, fanning
    out towards the outer corner, up to half an eye width past the lid, over a dark lash line."""
    import dlib

    from avatargen.face.detector import face_model_folder

    x, y = ASTRONAUT_FACE
    picture = Image.fromarray(astronaut()).crop((x - 128, y - 128, x + 128, y + 128))
    picture = np.asarray(picture.resize((512, 512), Image.Resampling.LANCZOS))
    predictor = dlib.shape_predictor(str(face_model_folder() / "shape_predictor_68_face_landmarks.dat"))
    box = dlib.get_frontal_face_detector()(picture, 1)[0]
    points = np.array([(p.x, p.y) for p in predictor(picture, box).parts()], np.float64)  # (68, 2)
    scale = 4  # strokes drawn at 4x, then shrunk: sub-pixel tips
    mask = Image.new("L", (512 * scale, 512 * scale), 0)
    draw = ImageDraw.Draw(mask)
    rng = np.random.default_rng(seed)
    for lid in (points[[36, 37, 38, 39]], points[[45, 44, 43, 42]]):  # outer corner first
        width = float(np.linalg.norm(lid[-1] - lid[0]))
        # The lid's margin: a smooth curve through its four points (outer corner at p = 0, inner at p = 1).
        knots = np.r_[0.0, np.cumsum(np.linalg.norm(np.diff(lid, axis=0), axis=1))] / width
        fit = [np.polyfit(knots, lid[:, k], 2) for k in (0, 1)]
        margin = lambda p: np.array([np.polyval(fit[0], p), np.polyval(fit[1], p)])  # noqa: E731
        ends = knots[-1]
        along = (lid[0] - lid[-1]) / width  # towards the outer corner
        normal = np.array([along[1], -along[0]]) * (1.0 if along[0] > 0 else -1.0)  # up the face, square to the eye
        line = [tuple(scale * margin(p)) for p in np.linspace(0.0, ends, 40)]
        draw.line(line, fill=235, width=round(0.05 * width * scale), joint="curve")  # the dark lash line
        for p in np.sort(rng.uniform(0.02, 0.97, 56)) * ends:
            base = margin(p)
            share = 1.0 - p / ends  # 1 at the outer corner
            lean = np.radians(-5.0 + 60.0 * share + rng.normal(0.0, 6.0))  # fanning out to the outer corner
            length = width * (0.22 + 0.26 * np.sin(np.pi * min(1.0, 0.1 + 0.75 * share)) + rng.normal(0.0, 0.04))
            curl = np.radians(25.0 + rng.normal(0.0, 6.0))  # the tip turns further up and out
            steps = np.linspace(0.0, 1.0, 12)
            angle = lean + curl * steps**1.5
            heading = np.cos(angle)[:, None] * normal + np.sin(angle)[:, None] * along  # (12, 2)
            path = base + np.cumsum(heading, axis=0) * (length / len(steps))
            for k in range(len(steps) - 1):
                thick = max(1, round(scale * 0.032 * width * (1.0 - steps[k]) ** 0.7))
                draw.line([tuple(scale * path[k]), tuple(scale * path[k + 1])], fill=255, width=thick)
    alpha = np.asarray(mask.resize((512, 512), Image.Resampling.BOX), np.float64)[..., None] / 255.0 * 0.92
    lash = np.array([22.0, 14.0, 12.0])
    return np.clip(picture * (1.0 - alpha) + lash * alpha, 0, 255).astype(np.uint8)


# The pictures the compositor must handle, by name (benchmarks/quality/lip_contours.py renders each).
TEST_PHOTOS = {
    "astronaut": astronaut,
    "grace_hopper": grace_hopper,
    "tilted": tilted,
    "half_body": half_body,
    "smiling_render": smiling_render,
    "web_palette": web_palette,
}
