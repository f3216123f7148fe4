"""``close_mouth``: a reference whose mouth is open (a smile showing its teeth, a photo taken mid-word) closed once,
before the warp drives it, so that in silence the lips meet and the opening follows the speech alone.

Across the mouth (per column along it), the upper lip with the skin up to ``ABOVE_HALF_WIDTHS`` above its outer edge
is stretched down, and the lower lip with the chin down to ``BELOW_HALF_WIDTHS`` below its outer edge is drawn up,
until the inner edges meet ``UPPER_SHARE`` of the way down the gap (the jaw does most of the closing). The map is
piecewise linear and monotonic across the mouth (nothing folds), the identity outside that band and past the
corners, where the gap is nil; bicubic (``cv2.remap``). A pixel the meeting line crosses shows both lips, each by
the share of the pixel on its side: the line is smooth at any slant, never a stair-step. The closed lips' inner
contour is the meeting line.

The face mesh's inner contour of a wide-open mouth often lies inside the opening (on a tongue or palate as pink as a
lip): what it leaves between the inner and the outer contour closed into a swollen lip with a bruise-coloured line.
So first, each inner point between the corners moves out towards the outer contour over the pixels nearer in colour
to the mouth's inside (the median within the inner contour: ``INSIDE_NEARER``) than to its lips (the median
between the contours), keeping at least ``LIP_KEPT`` of the lip (``_interior_edges``).
"""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw

from avatargen.compose.opencv import cv2
from avatargen.face.lips import Lips
from avatargen.numeric import column_median, nearest_pixels

OPEN_GAP = 0.04  # the inner lips this far apart at their widest (mouth widths) or more: the mouth is closed first
UPPER_SHARE = 0.25  # the upper lip comes down this share of the gap, the lower lip and chin up by the rest
ABOVE_HALF_WIDTHS = 0.35  # the skin above the upper lip that stretches with it
BELOW_HALF_WIDTHS = 1.2  # the chin below the lower lip that rises with it
LIP_KEPT = 0.3  # of each lip's thickness (inner to outer contour), kept as lip when the inner edge moves out ...
INSIDE_NEARER = 0.6  # ... over pixels this much nearer to the inside's colour than to the lips' (a lip's highlight
# beside a smile's teeth is not its inside)


def inner_gap(lips: Lips) -> float:
    """The widest distance between the inner lip edges, across the mouth, in mouth widths."""
    upper, lower = _edges(lips.inner, lips)
    along = np.linspace(-0.9, 0.9, 19)
    return float(np.max(np.interp(along, *lower) - np.interp(along, *upper))) / max(lips.width, 1.0)


def close_mouth(picture: np.ndarray, lips: Lips) -> tuple[np.ndarray, Lips]:
    """``picture`` (H, W, 3) uint8 with the mouth of ``lips`` closed, and the closed lips (same outer contour, the
    inner contour on the meeting line). Lips already closed (``inner_gap`` under ``OPEN_GAP``) come back as they are."""
    if inner_gap(lips) < OPEN_GAP:
        return picture, lips
    lips = _interior_edges(picture, lips)
    height, width = picture.shape[:2]
    half = max(lips.width / 2, 1.0)
    u, v, centre = lips.along, lips.down, lips.centre
    inner_up, inner_low = _edges(lips.inner, lips)
    outer_up, outer_low = _edges(lips.outer, lips)
    reach = [centre + half * (a * u + b * v) for a in (-1.1, 1.1) for b in (-1.5, 2.5)]
    xs, ys = np.array(reach)[:, 0], np.array(reach)[:, 1]
    top, bottom = max(0, int(ys.min()) - 2), min(height, int(np.ceil(ys.max())) + 3)
    left, right = max(0, int(xs.min()) - 2), min(width, int(np.ceil(xs.max())) + 3)
    if bottom - top < 2 or right - left < 2:
        return picture, lips
    gy, gx = np.mgrid[top:bottom, left:right].astype(np.float64)
    offset = np.stack([gx, gy], axis=-1) - centre  # (h, w, 2)
    along, down = offset @ u / half, offset @ v  # (h, w): half-widths along, pixels down
    ui, li = np.interp(along, *inner_up), np.interp(along, *inner_low)  # (h, w) inner edges
    uo, lo = np.interp(along, *outer_up), np.interp(along, *outer_low)  # (h, w) outer edges
    past = np.abs(along) >= 1.0
    gap = np.where(past, 0.0, np.clip(li - ui, 0.0, None))  # (h, w)
    meet = ui + UPPER_SHARE * gap
    start, end = np.minimum(uo, ui) - ABOVE_HALF_WIDTHS * half, np.maximum(lo, li) + BELOW_HALF_WIDTHS * half
    # above the meeting line: [start, meet] shows [start, ui]; below it: [meet, end] shows [li, end]
    upper = start + (down - start) * (ui - start) / np.maximum(meet - start, 1e-6)
    lower = li + (down - meet) * (end - li) / np.maximum(end - meet, 1e-6)
    band = (gap > 0) & (down > start) & (down < end)
    # a pixel the meeting line crosses shows both lips, each by the share of it on its side (no stair-step edge)
    above = np.where(band, np.clip(meet - down + 0.5, 0.0, 1.0), 1.0)  # (h, w)
    sources = np.stack([np.where(band, upper, down), np.where(band, lower, down)])  # (2, h, w)
    moved = np.stack([gx, gy], axis=-1) + (sources - down)[..., None] * v  # (2, h, w, 2) picture pixels to sample
    # Only the pixels the bicubic taps reach are converted: from one before the first to two after the last.
    ends = np.floor([[moved[..., i].min(), moved[..., i].max()] for i in range(2)]).astype(int)  # (2, 2): x, y
    low = np.clip(ends[:, 0] - 1, 0, (width - 1, height - 1))  # (2,) x, y
    high = np.maximum(np.minimum(ends[:, 1] + 3, (width, height)), low + 1)
    image = picture[low[1] : high[1], low[0] : high[0]].astype(np.float32)  # a copy (writable), sampled to (h, w, 3)
    maps = [np.ascontiguousarray(moved[..., i] - low[i], dtype=np.float32) for i in range(2)]  # (2, h, w) x, y in it
    sampled = [cv2.remap(image, x, y, cv2.INTER_CUBIC, borderMode=cv2.BORDER_REPLICATE) for x, y in zip(*maps)]
    share = above.astype(np.float32)[..., None]  # (h, w, 1)
    mixed = sampled[0] * share + sampled[1] * (1.0 - share)  # (h, w, 3)
    closed = picture.copy()
    closed[top:bottom, left:right] = np.clip(mixed + 0.5, 0, 255).astype(np.uint8)
    # the inner contour onto the meeting line
    inner_along = (lips.inner - centre) @ u / half
    line = np.interp(inner_along, *inner_up) + UPPER_SHARE * np.clip(
        np.interp(inner_along, *inner_low) - np.interp(inner_along, *inner_up), 0.0, None)  # fmt: skip
    inner = centre + inner_along[:, None] * half * u + line[:, None] * v
    return closed, Lips(lips.outer, inner)


def _edges(contour: np.ndarray, lips: Lips) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """The upper and lower edge of a (20, 2) lip contour (``avatargen.face.lips.OUTER``'s order: 0-10 the lower
    lip from corner to corner, 10-19 and 0 the upper) as (along in half-widths, increasing; pixels below the
    corners' midpoint), for ``np.interp``."""
    half = max(lips.width / 2, 1.0)
    u, v, centre = lips.along, lips.down, lips.centre

    def profile(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        a, d = (points - centre) @ u / half, (points - centre) @ v
        order = np.argsort(a)
        return a[order], d[order]

    return profile(np.concatenate([contour[10:], contour[:1]])), profile(contour[:11])


def _interior_edges(picture: np.ndarray, lips: Lips) -> Lips:
    """``lips`` with each inner point between the corners moved out towards the outer contour over the pixels of
    ``picture`` (H, W, 3) uint8 nearer in colour to the mouth's inside than to its lips (see the module docstring)."""
    height, width = picture.shape[:2]
    x0, y0 = np.maximum(np.floor(lips.outer.min(axis=0)).astype(int), 0)
    x1, y1 = np.minimum(np.ceil(lips.outer.max(axis=0)).astype(int) + 1, (width, height))
    if x1 - x0 < 3 or y1 - y0 < 3:
        return lips
    masks = []
    for contour in (lips.outer, lips.inner):
        mask = Image.new("L", (x1 - x0, y1 - y0), 0)
        ImageDraw.Draw(mask).polygon([(x - x0, y - y0) for x, y in contour], fill=1)
        masks.append(np.asarray(mask, bool))
    patch = picture[y0:y1, x0:x1].astype(np.float64)
    band, inside = patch[masks[0] & ~masks[1]], patch[masks[1]]
    if len(band) < 8 or len(inside) < 8:
        return lips
    lip, interior = column_median(band), column_median(inside)
    inner = lips.inner.copy()
    half = max(lips.width / 2, 1.0)
    outer_up, outer_low = _edges(lips.outer, lips)
    for index in [*range(1, 10), *range(11, 20)]:
        point = inner[index]
        along = float((point - lips.centre) @ lips.along) / half
        down = float((point - lips.centre) @ lips.down)
        edge = float(np.interp(along, *(outer_low if index < 10 else outer_up)))  # the outer contour here
        reach = (1.0 - LIP_KEPT) * (edge - down)  # pixels along ``down`` (negative: up)
        steps = np.arange(0.5, abs(reach) + 1e-9, 0.5) * np.sign(reach)  # (n,)
        if not len(steps):
            continue
        colours = nearest_pixels(picture, point + steps[:, None] * lips.down)  # (n, 3)
        inner_like = np.linalg.norm(colours - interior, axis=1) < INSIDE_NEARER * np.linalg.norm(colours - lip, axis=1)
        run = int(np.argmin(inner_like)) if not inner_like.all() else len(steps)  # the first lip-like pixel
        if run:
            inner[index] = point + steps[run - 1] * lips.down
    return Lips(lips.outer, inner)
