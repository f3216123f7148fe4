"""The reference's framing: the largest size within ``max_area`` pixels that keeps the picture's aspect, each side a
multiple of 64 (``get_size_less_than_area``), the picture resized to cover it and centre-cropped (its
``Resize(min(H, W))`` + ``CenterCrop``; a cover resize here, so a picture whose shorter side maps short of the target
is never padded)."""

from __future__ import annotations

import math

from avatargen.families.wan.framing import CoverCrop

DIVISOR = 64  # VAE 8 x patch 2 x FramePack's 4x kernel


def size_within_area(height: int, width: int, max_area: int, divisor: int = DIVISOR) -> tuple[int, int]:
    """(height, width): the picture scaled as large as fits ``max_area`` once each side is padded up to ``divisor``
    (the reference scans 100 scales from the unpadded fit down to the fully padded one)."""
    if height * width <= max_area:
        low, high = 0.1, 1.0
    else:
        d = divisor - 1
        b, a, c = d * (height + width), height * width, d**2 - max_area
        low, high = (-b + math.sqrt(b * b - 2 * a * c)) / (2 * a), math.sqrt(max_area / (height * width))
    for i in range(100):
        scale = high - (high - low) * i / 100
        h, w = int(height * scale), int(width * scale)
        h, w = h + (-h) % divisor, w + (-w) % divisor
        if h * w <= max_area:
            return h, w
    ratio = width / height
    h, w = int((max_area / ratio) ** 0.5 // divisor * divisor), int((max_area * ratio) ** 0.5 // divisor * divisor)
    if w >= width or h >= height:
        h, w = height // divisor * divisor, width // divisor * divisor
    return h, w


def liveavatar_framing(config, height: int, width: int) -> CoverCrop:
    """``FamilyEngine.framing``: the picture's frame within ``model.liveavatar.max_area``."""
    return CoverCrop((height, width), size_within_area(height, width, config.model.liveavatar.max_area))
