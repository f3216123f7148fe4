"""How InfiniteTalk and MultiTalk frame a picture (``model.wan.framing=bucket``): the aspect-ratio bucket nearest the
picture's height / width from the reference's table, the picture resized (bilinear) to cover it and centre-cropped,
so nearly the whole picture is kept (wan/multitalk.py ``resize_and_centercrop``, wan/utils/multitalk_utils.py
``ASPECT_RATIO_627`` and ``ASPECT_RATIO_960``).

``model.image_size`` is the side of the table's square bucket: 640 is the reference's 480p table
(``--size infinitetalk-480``), 960 its 720p one (``infinitetalk-720``); any other size (``wan_tiny``'s 64) scales the
nearer table, each side rounded to whole DiT patches. Person boxes go through the same crop (masks resized nearest,
as the reference resizes its masks).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import Tensor

# height / width -> (height, width), in the reference's order (its ties go to the first key).
BUCKETS_480P: dict[str, tuple[int, int]] = {
    "0.26": (320, 1216), "0.38": (384, 1024), "0.50": (448, 896), "0.67": (512, 768), "0.82": (576, 704),
    "1.00": (640, 640), "1.22": (704, 576), "1.50": (768, 512), "1.86": (832, 448), "2.00": (896, 448),
    "2.50": (960, 384), "2.83": (1088, 384), "3.60": (1152, 320), "3.80": (1216, 320), "4.00": (1280, 320),
}  # fmt: skip
BUCKETS_720P: dict[str, tuple[int, int]] = {
    "0.22": (448, 2048), "0.29": (512, 1792), "0.36": (576, 1600), "0.45": (640, 1408), "0.55": (704, 1280),
    "0.63": (768, 1216), "0.76": (832, 1088), "0.88": (896, 1024), "1.00": (960, 960), "1.14": (1024, 896),
    "1.31": (1088, 832), "1.50": (1152, 768), "1.58": (1216, 768), "1.82": (1280, 704), "1.91": (1344, 704),
    "2.20": (1408, 640), "2.30": (1472, 640), "2.67": (1536, 576), "2.89": (1664, 576), "3.62": (1856, 512),
    "3.75": (1920, 512),
}  # fmt: skip
SQUARE_480P, SQUARE_720P = 640, 960


def is_720p(image_size: int) -> bool:
    """Whether ``model.image_size`` selects the 720p table (nearer 960 than 640): the reference's shift is 11 there."""
    return abs(image_size - SQUARE_720P) < abs(image_size - SQUARE_480P)


def bucket_table(image_size: int, unit: int) -> dict[str, tuple[int, int]]:
    """The buckets of ``model.image_size``: a reference table as it is, or the nearer one scaled (sides multiples of
    ``unit``, the VAE stride times the DiT patch)."""
    table, square = (BUCKETS_720P, SQUARE_720P) if is_720p(image_size) else (BUCKETS_480P, SQUARE_480P)
    if image_size == square:
        return dict(table)
    scale = image_size / square
    return {key: (max(unit, round(h * scale / unit) * unit), max(unit, round(w * scale / unit) * unit))
            for key, (h, w) in table.items()}  # fmt: skip


def nearest_bucket(height: int, width: int, table: dict[str, tuple[int, int]]) -> tuple[int, int]:
    """The (height, width) of the bucket whose key is nearest ``height / width`` (the first such key on a tie)."""
    ratio = height / width
    return table[min(table, key=lambda key: abs(float(key) - ratio))]


@dataclass(frozen=True)
class CoverCrop:
    """Resize to cover ``target`` (height, width), then centre-crop to it: one picture size's framing."""

    source: tuple[int, int]  # (height, width) of the pictures it frames
    target: tuple[int, int]

    @property
    def resized(self) -> tuple[int, int]:
        """(height, width) after the cover resize: the reference's ``ceil(scale * side)``."""
        (h, w), (th, tw) = self.source, self.target
        scale = max(th / h, tw / w)
        return math.ceil(scale * h), math.ceil(scale * w)

    @property
    def offset(self) -> tuple[int, int]:
        """(top, left) of the crop in the resized picture (torchvision's ``center_crop``: rounded half to even)."""
        (rh, rw), (th, tw) = self.resized, self.target
        return int(round((rh - th) / 2.0)), int(round((rw - tw) / 2.0))

    def picture(self, rgb: np.ndarray) -> np.ndarray:
        """uint8 (H, W, 3) with H, W = ``source`` -> uint8 (th, tw, 3): PIL bilinear, then the crop."""
        if rgb.shape[:2] != self.source:
            raise ValueError(f"this framing is for {self.source} pictures, got {rgb.shape[:2]}")
        (rh, rw), (top, left), (th, tw) = self.resized, self.offset, self.target
        resized = np.asarray(Image.fromarray(np.ascontiguousarray(rgb)).resize((rw, rh), resample=Image.BILINEAR))
        return np.ascontiguousarray(resized[top : top + th, left : left + tw])

    def box(self, box: tuple[float, float, float, float]) -> tuple[float, float, float, float]:
        """A box (x0, y0, x1, y1) in the source picture's pixels -> the framed picture's (clipped to it)."""
        (h, w), (rh, rw), (top, left), (th, tw) = self.source, self.resized, self.offset, self.target
        sy, sx = rh / h, rw / w
        x0, y0, x1, y1 = box
        return (min(max(x0 * sx - left, 0.0), tw), min(max(y0 * sy - top, 0.0), th),
                min(max(x1 * sx - left, 0.0), tw), min(max(y1 * sy - top, 0.0), th))  # fmt: skip

    def masks(self, masks: Tensor) -> Tensor:
        """(N, H, W) masks at ``source`` size -> (N, th, tw): nearest resize, then the crop."""
        (rh, rw), (top, left), (th, tw) = self.resized, self.offset, self.target
        resized = F.interpolate(masks[None].float(), size=(rh, rw), mode="nearest")[0]  # (N, rh, rw)
        return resized[:, top : top + th, left : left + tw]


def cover_crop(height: int, width: int, image_size: int, unit: int) -> CoverCrop:
    """The framing of a ``height`` x ``width`` picture for ``model.image_size``."""
    return CoverCrop((height, width), nearest_bucket(height, width, bucket_table(image_size, unit)))


def pixels_to_unit_range(rgb: np.ndarray, device: torch.device) -> Tensor:
    """uint8 (H, W, 3) -> (1, 3, 1, H, W) in [-1, 1] with the reference's arithmetic (``x / 255``, ``- 0.5``, ``* 2``)."""
    x = torch.from_numpy(np.array(rgb, dtype=np.uint8, copy=True)).to(device).permute(2, 0, 1)[None, :, None]  # (1, 3, 1, H, W) uint8
    return (x / 255 - 0.5) * 2
