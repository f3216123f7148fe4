"""Draw one frame of a procedural cartoon face with Pillow's C drawing.

Every shape is a polygon (or a circle) in head units (see ``identity.py``); per frame the renderer moves the inner
features for yaw/pitch (a per-shape depth gives parallax), then maps all points through one similarity transform
(scale, roll about the neck, translation) and fills them straight onto a copy of the cached static layer
(background, neck, clothing). Drawing happens at ``supersample`` x the target size and is box-downscaled with
``Image.reduce``, which is the cheap way to get anti-aliased edges.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from PIL import Image, ImageDraw

from avatargen.data.identity import Identity
from avatargen.data.pose import NEUTRAL, FacePose

# Parallax: how far a shape at depth 1 moves for yaw = 1 / pitch = 1, in head units.
_YAW_SHIFT = 0.14
_PITCH_SHIFT = 0.09
_MAX_GAP = 0.32  # inner mouth opening at mouth_open = 1, head units
_HEAD_Y = 0.43  # face centre, fraction of the image height


class MouthBox(NamedTuple):
    """Pixel box (x0, y0, x1, y1), x1/y1 exclusive, of the mouth region: a fixed size per identity, following the
    mouth; it holds the lips at the widest opening."""

    x0: int
    y0: int
    x1: int
    y1: int


def _shade(c: tuple[int, int, int], f: float, add: tuple[int, int, int] = (0, 0, 0)) -> tuple[int, int, int]:
    return tuple(int(max(0, min(255, v * f + a))) for v, a in zip(c, add))  # type: ignore[return-value]


def _mixc(a: tuple[int, int, int], b: tuple[int, int, int], t: float) -> tuple[int, int, int]:
    return tuple(int(round(x + (y - x) * t)) for x, y in zip(a, b))  # type: ignore[return-value]


def _ellipse(cx: float, cy: float, rx: float, ry: float, n: int = 28, a0: float = 0.0, a1: float = 2 * math.pi):
    th = np.linspace(a0, a1, n, endpoint=(a1 - a0) < 2 * math.pi - 1e-6)
    return np.stack([cx + rx * np.cos(th), cy + ry * np.sin(th)], axis=1)


class FaceRenderer:
    """Renders one identity at ``size`` x ``size`` pixels; ``render(pose)`` gives the frame and its mouth box."""

    def __init__(self, identity: Identity, size: int = 256, supersample: int = 2) -> None:
        self.identity = identity
        self.size = int(size)
        self.ss = int(supersample)
        self._canvas = self.size * self.ss
        self._scale = identity.head_scale * self._canvas  # pixels (of the canvas) per head unit
        self._centre = np.array([0.5 * self._canvas, _HEAD_Y * self._canvas])
        self._pivot = np.array([0.0, 0.9 * identity.face_height])  # roll turns the head about the neck
        self._static = self._draw_static()
        self._shapes = self._build_shapes()

    # ---------------------------------------------------------------- static layer
    def _draw_static(self) -> Image.Image:
        idn, n = self.identity, self._canvas
        a = np.array(idn.background_a, np.float32)
        b = np.array(idn.background_b, np.float32)
        yy, xx = np.mgrid[0:n, 0:n].astype(np.float32) / n
        if idn.background_style == "gradient":
            t = yy
        elif idn.background_style == "stripes":
            t = 0.5 * (np.sin((xx + yy) * 2 * math.pi * 7) > 0.2) + 0.5 * yy
        elif idn.background_style == "dots":
            t = 0.6 * (((xx * 10) % 1 - 0.5) ** 2 + ((yy * 10) % 1 - 0.5) ** 2 < 0.04) + 0.4 * yy
        else:  # vignette
            t = np.clip(((xx - 0.5) ** 2 + (yy - 0.45) ** 2) * 3.0, 0, 1)
        bg = a[None, None] + t[..., None] * (b - a)[None, None]
        img = Image.fromarray(np.clip(bg, 0, 255).astype(np.uint8))
        d = ImageDraw.Draw(img)

        s, (cx, cy) = self._scale, self._centre
        skin, cloth = idn.skin, idn.clothing
        neck_w = 0.36 * idn.face_width * s
        chin_y = cy + idn.face_height * s
        shoulder_y = chin_y + 0.42 * s
        # neck with a shadow band under the jaw
        d.rectangle([cx - neck_w, cy, cx + neck_w, shoulder_y + 0.3 * s], fill=skin)
        d.rectangle([cx - neck_w, cy, cx + neck_w, chin_y + 0.12 * s], fill=_shade(skin, 0.82))
        # shoulders: a wide rounded trapezoid
        sw = 1.75 * s
        body = [(cx - sw, n + 10), (cx - sw, shoulder_y + 0.55 * s), (cx - sw + 0.35 * s, shoulder_y + 0.08 * s),
                (cx - 0.3 * s, shoulder_y - 0.02 * s), (cx + 0.3 * s, shoulder_y - 0.02 * s),
                (cx + sw - 0.35 * s, shoulder_y + 0.08 * s), (cx + sw, shoulder_y + 0.55 * s), (cx + sw, n + 10)]
        d.polygon(body, fill=cloth)
        d.ellipse([cx - sw - 0.02 * s, shoulder_y + 0.05 * s, cx - sw + 0.7 * s, shoulder_y + 1.0 * s], fill=cloth)
        d.ellipse([cx + sw - 0.7 * s, shoulder_y + 0.05 * s, cx + sw + 0.02 * s, shoulder_y + 1.0 * s], fill=cloth)
        dark, light = _shade(cloth, 0.7), _shade(cloth, 1.0, (40, 40, 40))
        if idn.collar == "crew":
            d.chord([cx - neck_w * 1.25, shoulder_y - 0.25 * s, cx + neck_w * 1.25, shoulder_y + 0.22 * s], 0, 180,
                    fill=dark)
            d.chord([cx - neck_w * 1.05, shoulder_y - 0.3 * s, cx + neck_w * 1.05, shoulder_y + 0.14 * s], 0, 180,
                    fill=skin)
        elif idn.collar == "v":
            d.polygon([(cx - neck_w * 1.2, shoulder_y - 0.02 * s), (cx, shoulder_y + 0.5 * s),
                       (cx + neck_w * 1.2, shoulder_y - 0.02 * s)], fill=dark)
            d.polygon([(cx - neck_w, shoulder_y - 0.04 * s), (cx, shoulder_y + 0.42 * s),
                       (cx + neck_w, shoulder_y - 0.04 * s)], fill=skin)
        elif idn.collar == "shirt":
            d.polygon([(cx - neck_w * 0.95, shoulder_y - 0.04 * s), (cx, shoulder_y + 0.4 * s),
                       (cx + neck_w * 0.95, shoulder_y - 0.04 * s)], fill=skin)
            for sgn in (-1, 1):
                tip = (cx + sgn * 0.02 * s, shoulder_y + 0.42 * s)
                d.polygon([(cx + sgn * neck_w * 1.05, shoulder_y - 0.14 * s), tip,
                           (cx + sgn * neck_w * 1.7, shoulder_y + 0.2 * s)], fill=light, outline=dark)
        else:  # turtleneck
            d.rounded_rectangle([cx - neck_w * 1.12, chin_y + 0.05 * s, cx + neck_w * 1.12, shoulder_y + 0.12 * s],
                                radius=0.1 * s, fill=_shade(cloth, 0.85))
            for k in range(3):
                y = chin_y + (0.14 + 0.09 * k) * s
                d.line([(cx - neck_w * 1.1, y), (cx + neck_w * 1.1, y)], fill=dark, width=max(1, self.ss))
        return img

    # ---------------------------------------------------------------- identity shapes (head units, pose-free)
    def _face_outline(self, grow: float = 0.0) -> np.ndarray:
        idn = self.identity
        fw, fh = idn.face_width + grow, idn.face_height + grow
        th = np.linspace(0, 2 * math.pi, 64, endpoint=False)
        c, s = np.cos(th), np.sin(th)
        x, y = fw * c, fh * s
        low = s > 0  # below the face centre the cheeks narrow to the jaw and the chin
        u = s[low]
        x[low] = fw * c[low] * (1 - (1 - idn.jaw_width) * u**1.6)
        y[low] = fh * (u - idn.chin * 0.06 * (1 - u) ** 2 + idn.chin * 0.04 * u**8)
        y[~low] *= 1.04  # a slightly taller skull
        return np.stack([x, y], 1)

    def _build_shapes(self) -> dict[str, object]:
        idn = self.identity
        fw, fh, vol = idn.face_width, idn.face_height, idn.hair_volume
        sh: dict[str, object] = {"face": self._face_outline()}
        ey = idn.eye_height + 0.12
        sh["ears"] = [_ellipse(sg * fw * 0.97, ey, idn.ear_size * 0.55, idn.ear_size, 16) for sg in (-1, 1)]
        sh["ears_in"] = [_ellipse(sg * fw * 1.0, ey, idn.ear_size * 0.28, idn.ear_size * 0.6, 12) for sg in (-1, 1)]
        # hairline: temple to temple across the forehead, lower with more fringe, swept to one side
        hair_top = -fh * 1.04 - vol
        hl_x = np.linspace(-fw * 1.02, fw * 1.02, 21)
        u = hl_x / (fw * 1.02)
        line_y = -fh * (0.78 - 0.32 * idn.fringe) - 0.12 * (1 - u**2) * (1 - idn.fringe) * 0.0
        sweep = 0.1 * idn.fringe * u
        hl_y = line_y + sweep + 0.28 * np.abs(u) ** 3 - 0.06 * (1 - u**2) * (1 - idn.fringe)
        hl_y = np.minimum(hl_y, idn.eye_height - 0.14)
        outer = _ellipse(0, -0.02, fw + vol * 0.9, fh * 1.04 + vol, 24, math.pi * 0.98, math.pi * 2.02)
        cap = np.concatenate([outer, np.stack([hl_x, hl_y], 1)[::-1]])
        style = idn.hair_style
        sh["hair_back"] = []
        sh["hair_front"] = []
        sh["hair_blobs"] = []  # circles (cx, cy, r) drawn with the front hair
        if style == "short":
            sh["hair_back"] = [_ellipse(0, -0.1, fw + vol, fh * 0.98 + vol, 32, math.pi * 0.9, math.pi * 2.1)]
            sh["hair_front"] = [cap]
        elif style == "long":
            length = 1.5 + 0.5 * idn.fringe
            back = np.concatenate([
                _ellipse(0, -0.02, fw + vol + 0.06, fh * 1.04 + vol, 24, math.pi, math.pi * 2),
                [(fw + vol + 0.1, length * 0.7), (fw + vol + 0.02, length), (-fw - vol - 0.02, length),
                 (-fw - vol - 0.1, length * 0.7)],
            ])
            sh["hair_back"] = [back]
            sh["hair_front"] = [cap]
        elif style == "bun":
            sh["hair_back"] = [_ellipse(0, hair_top - 0.12, 0.3, 0.24, 24)]
            sh["hair_front"] = [cap]
        elif style == "curly":
            rng = np.random.default_rng(int(fw * 1e6) ^ int(idn.fringe * 1e6))
            blobs = []
            for a in np.linspace(math.pi * 0.88, math.pi * 2.12, 15):
                r = 0.17 + vol * 0.6 + rng.uniform(-0.02, 0.03)
                blobs.append((1.0 * (fw + vol * 0.5) * math.cos(a), -0.05 + (fh + vol * 0.5) * math.sin(a), r))
            for x in np.linspace(-0.55, 0.55, 5):
                blobs.append((x * fw, float(np.interp(x * fw, hl_x, hl_y)) - 0.05, 0.14 + rng.uniform(0, 0.03)))
            sh["hair_back"] = [_ellipse(0, -0.12, fw + vol + 0.1, fh + vol, 28, math.pi * 0.85, math.pi * 2.15)]
            sh["hair_front"] = [cap]
            sh["hair_blobs"] = blobs
        # full beard: the face below the cheek line, closed above the mouth by a moustache curve
        if idn.beard:
            face = self._face_outline(0.01)
            lower = face[face[:, 1] > idn.mouth_y - 0.22]
            lower = lower[np.argsort(np.arctan2(lower[:, 1], lower[:, 0]))]
            xs = np.linspace(lower[-1, 0], lower[0, 0], 15)
            top = idn.mouth_y - 0.12 + 0.06 * (np.abs(xs) / fw) - 0.03 * np.cos(xs / fw * math.pi)
            sh["beard"] = np.concatenate([lower, np.stack([xs, top], 1)])
        # nose: nostril wings as an arc under the tip, a bridge shadow on one side
        nl, nw = idn.nose_length, idn.nose_width
        ny = idn.eye_height + 0.12 + nl
        sh["nose_tip"] = _ellipse(0, ny - 0.01, nw * 0.75, nw * 0.55, 16)
        sh["nose_arc"] = _ellipse(0, ny, nw, nw * 0.55, 12, math.pi * 0.1, math.pi * 0.9)
        sh["nostrils"] = [(sg * nw * 0.45, ny + nw * 0.25, nw * 0.16) for sg in (-1, 1)]
        sh["bridge"] = np.array([[nw * 0.25, idn.eye_height + 0.08], [nw * 0.45, ny - nw * 0.4]])
        return sh

    # ---------------------------------------------------------------- per-frame transform
    def _transform(self, pose: FacePose):
        s = self._scale
        c, sn = math.cos(pose.roll), math.sin(pose.roll)
        rot = np.array([[c, -sn], [sn, c]]) * s
        shift = self._centre + np.array([pose.dx, pose.dy]) * self._canvas
        pivot = self._pivot
        yaw, pitch = pose.yaw * _YAW_SHIFT, pose.pitch * _PITCH_SHIFT

        def xf(pts: np.ndarray, depth: float = 1.0) -> list[float]:
            p = np.asarray(pts, dtype=np.float64) + (yaw * depth, pitch * depth)
            return ((p - pivot) @ rot.T + pivot * s + shift).ravel().tolist()

        def xp(x: float, y: float, depth: float = 1.0) -> tuple[float, float]:
            px, py = x + yaw * depth - pivot[0], y + pitch * depth - pivot[1]
            return (rot[0, 0] * px + rot[0, 1] * py + pivot[0] * s + shift[0],
                    rot[1, 0] * px + rot[1, 1] * py + pivot[1] * s + shift[1])

        return xf, xp

    # ---------------------------------------------------------------- drawing
    def render(self, pose: FacePose = NEUTRAL) -> tuple[np.ndarray, MouthBox]:
        """The frame (H, W, 3) uint8 for ``pose`` and the pixel box of its mouth region."""
        idn, sh, ss = self.identity, self._shapes, self.ss
        img = self._static.copy()
        d = ImageDraw.Draw(img)
        xf, xp = self._transform(pose)
        s = self._scale
        skin, hair = idn.skin, idn.hair_colour
        skin_dark = _shade(skin, 0.8)

        def circle(x: float, y: float, r: float, depth: float, fill) -> None:
            px, py = xp(x, y, depth)
            d.ellipse([px - r * s, py - r * s, px + r * s, py + r * s], fill=fill)

        # under the head: chin shadow on the neck, back hair, ears
        d.polygon(xf(sh["face"] * (0.85, 1.0) + (0, 0.1), 0.0), fill=_shade(skin, 0.72))
        for poly in sh["hair_back"]:
            d.polygon(xf(poly, -0.3), fill=_shade(hair, 0.85))
        for ear, ear_in in zip(sh["ears"], sh["ears_in"]):
            d.polygon(xf(ear, -0.4), fill=skin)
            d.polygon(xf(ear_in, -0.4), fill=skin_dark)
        d.polygon(xf(sh["face"], 0.25), fill=skin)
        if idn.blush > 0.05:
            blush = _mixc(skin, (230, 110, 120), 0.25 * idn.blush)
            for sg in (-1, 1):
                circle(sg * idn.face_width * 0.55, idn.mouth_y - 0.2, 0.12, 0.9, blush)
        if "beard" in sh:
            d.polygon(xf(sh["beard"], 0.6), fill=_mixc(hair, skin, 0.15))

        # nose
        d.polygon(xf(sh["nose_tip"], 1.4), fill=_shade(skin, 1.0, (12, 10, 8)))
        d.line(xf(sh["nose_arc"], 1.4), fill=_shade(skin, 0.68), width=max(1, int(1.5 * ss)))
        for x, y, r in sh["nostrils"]:
            circle(x, y, r, 1.35, _shade(skin, 0.55))
        d.line(xf(sh["bridge"], 1.2), fill=_shade(skin, 0.86), width=max(1, int(1.5 * ss)))

        mouth_centre = self._draw_mouth(d, xf, pose)
        self._draw_eyes(d, xf, xp, pose)
        self._draw_brows(d, xf, pose)

        # front hair
        for poly in sh["hair_front"]:
            d.polygon(xf(poly, 0.2), fill=hair)
        for x, y, r in sh["hair_blobs"]:
            circle(x, y, r, 0.1, _shade(hair, 0.92 + 0.16 * ((x * 7.3) % 1)))
        if idn.hair_style == "bald":
            circle(-idn.face_width * 0.3, -idn.face_height * 0.75, 0.09, 0.3, _shade(skin, 1.0, (25, 25, 25)))
        if idn.glasses:
            self._draw_glasses(d, xf, xp)

        if ss > 1:
            img = img.reduce(ss)
        return np.asarray(img), self._mouth_box(mouth_centre)

    def _mouth_box(self, centre: tuple[float, float]) -> MouthBox:
        idn, k = self.identity, self._scale / self.ss
        hw = (idn.mouth_width * 1.15 + 0.06) * k
        top, bottom = (idn.lip_thickness + 0.06) * k, (_MAX_GAP * 0.75 + idn.lip_thickness * 1.3 + 0.06) * k
        cx, cy = centre[0] / self.ss, centre[1] / self.ss
        x0, y0 = int(round(cx - hw)), int(round(cy - top))
        w, h = int(round(2 * hw)), int(round(top + bottom))
        x0, y0 = min(max(x0, 0), self.size - w), min(max(y0, 0), self.size - h)
        return MouthBox(x0, y0, x0 + w, y0 + h)

    def _draw_mouth(self, d: ImageDraw.ImageDraw, xf, pose: FacePose) -> tuple[float, float]:
        idn, ss = self.identity, self.ss
        mw = idn.mouth_width * pose.mouth_width
        o = max(0.0, min(1.0, pose.mouth_open))
        gap = o * _MAX_GAP
        x = np.linspace(-mw, mw, 21)
        u = x / mw
        bulge = np.sqrt(np.clip(1 - u**2, 0, 1))
        line = idn.mouth_y - pose.smile * 0.07 * u**2 + pose.smile * 0.02
        up_in = line - gap * 0.28 * bulge
        lo_in = line + gap * 0.72 * bulge**0.8
        t_up = idn.lip_thickness * (1 - 0.3 * o)
        bow = 1 + 0.3 * np.exp(-(((np.abs(u) - 0.3) / 0.16) ** 2)) - 0.3 * np.exp(-((u / 0.1) ** 2))
        up_out = up_in - t_up * bulge**0.7 * bow
        lo_out = lo_in + idn.lip_thickness * 1.3 * bulge**0.6
        depth = 1.0
        lip = idn.lip_colour
        if gap * self._scale > 0.6 * ss:
            d.polygon(xf(np.concatenate([np.stack([x, up_in], 1), np.stack([x, lo_in], 1)[::-1]]), depth),
                      fill=(55, 18, 22))
            # tongue, then teeth: the upper row always, the lower row when wide open
            tongue = _ellipse(0, lo_in[10] - gap * 0.12, mw * 0.5, gap * 0.25, 16)
            d.polygon(xf(tongue, depth), fill=(170, 70, 75))
            inner = np.abs(u) < 0.78
            teeth_h = np.minimum(0.055 * bulge[inner] ** 0.5, lo_in[inner] - up_in[inner])
            top = np.stack([x[inner], up_in[inner]], 1)
            bottom = np.stack([x[inner], up_in[inner] + teeth_h], 1)
            d.polygon(xf(np.concatenate([top, bottom[::-1]]), depth), fill=(236, 232, 220))
            if o > 0.55:
                lo_h = np.minimum(0.04 * bulge[inner] * (o - 0.55) / 0.45, lo_in[inner] - up_in[inner] - teeth_h)
                lt = np.stack([x[inner], lo_in[inner] - lo_h], 1)
                lb = np.stack([x[inner], lo_in[inner] + 0.01], 1)
                d.polygon(xf(np.concatenate([lt, lb[::-1]]), depth), fill=(220, 215, 205))
        d.polygon(xf(np.concatenate([np.stack([x, up_out], 1), np.stack([x, up_in], 1)[::-1]]), depth),
                  fill=_shade(lip, 0.9))
        d.polygon(xf(np.concatenate([np.stack([x, lo_in], 1), np.stack([x, lo_out], 1)[::-1]]), depth), fill=lip)
        d.line(xf(np.stack([x, up_in], 1), depth), fill=_shade(lip, 0.5), width=max(1, ss))
        # the fixed-size mouth box follows the resting mouth centre
        c = xf(np.array([[0.0, idn.mouth_y]]), depth)
        return c[0], c[1]

    def _draw_eyes(self, d: ImageDraw.ImageDraw, xf, xp, pose: FacePose) -> None:
        idn, ss, s = self.identity, self.ss, self._scale
        blink = max(-0.5, min(1.0, pose.blink))
        ew = idn.eye_size
        up_h, lo_h = ew * 0.62 * (1 - 0.5 * min(blink, 0)), ew * 0.42
        t = np.linspace(0, 1, 13)
        bump = np.sin(math.pi * t)
        iris_r = ew * 0.5
        for sg in (-1, 1):
            cx, cy = sg * idn.eye_spacing, idn.eye_height
            ex = cx + ew * (2 * t - 1)
            lid_close = max(blink, 0)
            upper = cy - up_h * bump**0.8 * (1 - lid_close) + lid_close * 0.5 * lo_h * bump
            lower = cy + lo_h * bump * (1 - 0.5 * lid_close)
            upper -= sg * 0.02 * (t - 0.5)  # outer corners slightly up
            up_pts, lo_pts = np.stack([ex, upper], 1), np.stack([ex, lower], 1)
            if lid_close < 0.95:
                d.polygon(xf(np.concatenate([up_pts, lo_pts[::-1]])), fill=(246, 244, 240))
                gx = cx + max(-1.0, min(1.0, pose.gaze)) * ew * 0.45
                gy = cy + 0.1 * pose.pitch * ew
                for r, col in ((iris_r, idn.iris), (iris_r * 0.48, (15, 12, 12))):
                    px, py = xp(gx, gy)
                    d.ellipse([px - r * s, py - r * s, px + r * s, py + r * s], fill=col)
                hx, hy = xp(gx + iris_r * 0.35, gy - iris_r * 0.35)
                r = iris_r * 0.22 * s
                d.ellipse([hx - r, hy - r, hx + r, hy + r], fill=(255, 255, 255))
                # skin masks outside the lids hide the parts of the iris the lids cover
                m = iris_r + 0.04
                top_mask = np.concatenate([[[cx - ew - m, cy]], up_pts, [[cx + ew + m, cy], [cx + ew + m, cy - ew - m],
                                                                          [cx - ew - m, cy - ew - m]]])
                bot_mask = np.concatenate([[[cx - ew - m, cy]], lo_pts, [[cx + ew + m, cy], [cx + ew + m, cy + ew + m],
                                                                          [cx - ew - m, cy + ew + m]]])
                d.polygon(xf(top_mask), fill=idn.skin)
                d.polygon(xf(bot_mask), fill=idn.skin)
                d.line(xf(lo_pts[2:-2]), fill=_shade(idn.skin, 0.82), width=max(1, ss // 2))
            # lid crease and lash line
            crease = np.stack([ex[2:-2], upper[2:-2] - 0.05 - 0.02 * bump[2:-2]], 1)
            d.line(xf(crease), fill=_shade(idn.skin, 0.8), width=max(1, ss))
            d.line(xf(up_pts), fill=(35, 25, 25), width=max(1, int(1.6 * ss)))
            lash = np.array([[cx + sg * ew, upper[-1 if sg > 0 else 0]],
                             [cx + sg * (ew + 0.04), upper[-1 if sg > 0 else 0] - 0.03]])
            d.line(xf(lash), fill=(35, 25, 25), width=max(1, int(1.6 * ss)))

    def _draw_brows(self, d: ImageDraw.ImageDraw, xf, pose: FacePose) -> None:
        idn = self.identity
        raise_ = max(-1.0, min(1.0, pose.brow_raise))
        t = np.linspace(0, 1, 11)
        bw = idn.eye_size * 1.35
        for sg in (-1, 1):
            cx = sg * (idn.eye_spacing + 0.02)
            x = cx + sg * bw * (2 * t - 1)  # t = 0 inner end, 1 outer end
            base = idn.eye_height - idn.eye_size * 0.95 - 0.08 * raise_
            inner_lift = 0.05 * raise_  # surprise lifts the inner ends, a frown pulls them down
            y = base - 0.05 * np.sin(math.pi * t) - math.tan(idn.brow_angle) * bw * (2 * t - 1) * 0.5
            y = y - inner_lift * (1 - t)
            th = idn.brow_thickness * (1.0 - 0.55 * t)
            pts = np.concatenate([np.stack([x, y - th * 0.5], 1), np.stack([x, y + th * 0.5], 1)[::-1]])
            d.polygon(xf(pts), fill=idn.brow_colour)

    def _draw_glasses(self, d: ImageDraw.ImageDraw, xf, xp) -> None:
        idn, ss = self.identity, self.ss
        r = idn.eye_size * 1.45
        col = (30, 30, 35)
        for sg in (-1, 1):
            ring = _ellipse(sg * idn.eye_spacing, idn.eye_height + 0.01, r, r * 0.8, 24)
            d.line(xf(np.concatenate([ring, ring[:1]]), 1.1), fill=col, width=max(1, int(1.5 * ss)), joint="curve")
        bridge = np.array([[-idn.eye_spacing + r, idn.eye_height - 0.02], [idn.eye_spacing - r, idn.eye_height - 0.02]])
        d.line(xf(bridge, 1.1), fill=col, width=max(1, int(1.5 * ss)))
