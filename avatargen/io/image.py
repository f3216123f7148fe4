"""Image in: the reference portrait, whatever its format or mode, as a square uint8 RGB array (and, for reference
compositing, the picture itself and where the square was cut from it)."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from avatargen.errors import BadInputError
from avatargen.face.framing import centre_crop, centre_square, frame_face
from avatargen.io.input_files import IMAGE_FIX, check_input_file

if TYPE_CHECKING:
    from avatargen.face.detector import Face

MIN_SIDE = 32  # below this there are too few pixels for a face
# Pixels decoded, or in the padded square: a 48 MP phone photo fits. At the limit the picture is 192 MB of RGB, and
# loading it peaks at about three times that: 471-544 MiB for an 8000x8000 PNG, 8- or 16-bit (benchmarks/memory/image_memory.py).
MAX_PIXELS = 64_000_000
_BAND_ROWS = 256  # rows converted to RGB at a time: the conversion's temporaries stay a few MB
MAX_ASPECT = 4.0  # long side / short side: past it there is no portrait to crop or pad
FITS = ("face", "crop", "pad")


@dataclass(frozen=True)
class Reference:
    """A loaded reference: the model's ``square`` input (size, size, 3) uint8, the ``picture`` it was cut from
    (H, W, 3) uint8 RGB, upright, ``crop`` (left, top, side) in the picture's pixels (it may reach past its edges),
    ``face``, the face found in the picture (None: not searched or not found), and ``alpha``, the picture's
    opacity (H, W) uint8 where its file had transparency (None: opaque; ``picture`` is it composited over white)."""

    square: np.ndarray
    picture: np.ndarray
    crop: tuple[int, int, int]
    face: Face | None = None
    alpha: np.ndarray | None = None

    @property
    def square_face(self) -> Face | None:
        """``face`` where it is also the face of ``square``: the square is the picture itself, uncut and unscaled (a
        square image framed already, at the model's size); None otherwise, or where no face was found."""
        height, width = self.picture.shape[:2]
        whole = self.crop == (0, 0, width) and height == width == self.square.shape[0]
        return self.face if whole else None


def load_reference_image(
    path: str | Path, size: int, fit: str = "crop", warn: Callable[[str], None] | None = None
) -> np.ndarray:
    """Load an image file as a (size, size, 3) uint8 RGB array.

    EXIF orientation is applied; animated images give their first frame; transparency is composited over white;
    16-bit images are scaled (not clipped) to 8 bits. ``fit="face"`` frames the square around the face as the
    model was trained (``avatargen.face.framing``; no face: centre crop and one line to ``warn``), ``fit="crop"``
    center-crops to a square, ``fit="pad"`` extends the short side by repeating the edge pixels; each is then
    resized with Lanczos.

    Raises ``ValueError`` for an unknown ``fit`` or non-positive ``size``, and ``BadInputError`` for a missing,
    non-image, corrupt or smaller-than-32x32 file.
    """
    return load_reference(path, size, fit, warn).square


def load_reference(
    path: str | Path, size: int, fit: str = "crop", warn: Callable[[str], None] | None = None, face: int | None = None
) -> Reference:
    """``load_reference_image``, keeping the picture, the crop square and the face found (``Reference``); ``face``:
    with ``fit="face"``, which face to frame (1-based, left to right; None: the largest)."""
    if fit not in FITS:
        raise ValueError(f"fit must be one of {FITS}, got {fit!r}")
    if size <= 0:
        raise ValueError(f"size must be positive, got {size}")
    path = Path(path)
    rgb, alpha = read_picture_and_alpha(path, fit)
    return reference_from_rgb(rgb, size, fit, warn, f"image '{path}'", face, alpha)


def read_picture(path: str | Path, fit: str = "crop") -> np.ndarray:
    """The image file's first frame as (H, W, 3) uint8 RGB, upright, as ``load_reference`` frames it (``fit``: the
    size limits it is checked against). Raises ``BadInputError`` as ``load_reference`` does."""
    return read_picture_and_alpha(path, fit)[0]


def read_picture_and_alpha(path: str | Path, fit: str = "crop") -> tuple[np.ndarray, np.ndarray | None]:
    """``read_picture``, and the picture's opacity (H, W) uint8 where it has transparency that is not opaque
    everywhere (None: opaque; the RGB is then composited over white)."""
    path = Path(path)
    try:
        return _to_rgb(_open(path, fit), path)
    except ValueError as err:  # a mode Pillow cannot convert to RGB (e.g. LAB without a color profile)
        raise BadInputError(f"image '{path}' has an unsupported color mode ({err}); {IMAGE_FIX}") from None


def reference_from_rgb(
    rgb: np.ndarray,
    size: int,
    fit: str = "crop",
    warn: Callable[[str], None] | None = None,
    name: str = "the picture",
    face: int | None = None,
    alpha: np.ndarray | None = None,
) -> Reference:
    """``load_reference`` of a picture already decoded (uint8 (H, W, 3) RGB, upright): a source video's first frame;
    ``face`` as there; ``alpha``: its opacity (H, W) uint8 (``read_picture_and_alpha``; None: opaque)."""
    height, width = rgb.shape[:2]
    if min(height, width) < MIN_SIDE:
        raise BadInputError(f"{name} is {width}x{height}, too small to hold a face; give at least {MIN_SIDE}x{MIN_SIDE}")
    number, face = face, None
    if fit == "face":
        framing = frame_face(rgb, warn or _print_warning, name, number=number)
        square, face, crop, rgb = framing.crop, framing.face, framing.square, framing.picture
        if alpha is not None and framing.turns:  # the opacity turned upright with the picture
            alpha = np.rot90(alpha, framing.turns)
    elif fit == "crop":
        square, crop = centre_crop(rgb), centre_square(rgb)
    else:
        square = _edge_pad(rgb)
        side = max(height, width)
        crop = (-((side - width) // 2), -((side - height) // 2), side)
    if square.shape[0] != size:
        square = np.asarray(Image.fromarray(square).resize((size, size), Image.Resampling.LANCZOS))
    alpha = np.ascontiguousarray(alpha) if alpha is not None else None
    return Reference(np.ascontiguousarray(square), np.ascontiguousarray(rgb), crop, face, alpha)


def _print_warning(line: str) -> None:
    print(line, file=sys.stderr)


def save_png(path: str | Path, rgb: np.ndarray) -> None:
    """Write an (H, W, 3) uint8 RGB array as a PNG."""
    if rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3:
        raise ValueError(f"expected (H, W, 3) uint8, got {rgb.shape} {rgb.dtype}")
    Image.fromarray(rgb).save(Path(path), format="PNG")


def check_image_bounds(path: Path, width: int, height: int, fit: str) -> None:
    """Refuse, from the header alone, an image whose decoding or padding would take unbounded memory: a 10 kB PNG
    can say 32x2,000,000 pixels, and ``fit=pad`` makes a square of its long side."""
    long, short = max(width, height), max(1, min(width, height))
    if long / short > MAX_ASPECT:
        raise BadInputError(
            f"image '{path}' is {width}x{height}, an aspect ratio over {MAX_ASPECT:g}:1; a reference portrait must be "
            f"at most {MAX_ASPECT:g}:1, crop it"
        )
    work = long * long if fit == "pad" else width * height
    if work > MAX_PIXELS:
        what = f"padded to a {long}x{long} square" if fit == "pad" else f"{width}x{height}"
        raise BadInputError(
            f"image '{path}' is too large: {what} is {work / 1e6:.0f} MP, over the limit of {MAX_PIXELS / 1e6:.0f} MP; "
            "downscale it"
        )


def _open(path: Path, fit: str) -> Image.Image:
    """Open and fully decode the first frame, upright; file problems become ``BadInputError``."""
    check_input_file(path, "image", IMAGE_FIX)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)  # a 90+ MP "portrait" is not one
            img = Image.open(path)
            try:
                check_image_bounds(path, *img.size, fit)  # before anything is decoded
                img.seek(0)
                img.load()  # open() reads only the header; decoding is where truncation and corruption show up
                ImageOps.exif_transpose(img, in_place=True)  # no second copy of a picture up to 64 MP
                if getattr(img, "n_frames", 1) > 1:  # an animation keeps its file open for the other frames
                    first = img.copy()
                    img.close()
                    return first
                return img  # one frame: Pillow closed the file once it was loaded
            except BaseException:
                img.close()
                raise
    except UnidentifiedImageError:
        raise BadInputError(f"file '{path}' is not an image Pillow can read; {IMAGE_FIX}") from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise BadInputError(f"image '{path}' is too large to be a reference portrait; downscale it") from None
    except PermissionError:
        raise BadInputError(f"image file '{path}' is not readable; fix its permissions") from None
    except (OSError, SyntaxError, ValueError) as err:  # Pillow raises SyntaxError for some broken PNG chunks
        raise BadInputError(f"image '{path}' is corrupt or truncated ({err}); re-export it, {IMAGE_FIX}") from None


def _to_rgb(img: Image.Image, path: Path) -> tuple[np.ndarray, np.ndarray | None]:
    """Any Pillow mode to (H, W, 3) uint8 RGB, converted a band of rows at a time: the picture is held twice at most
    (Pillow's decoded image and the array), never as float64 or a converted copy of the whole; and its opacity
    (H, W) uint8 where it has transparency (None: none, or opaque everywhere; a third of the array's bytes more)."""
    width, height = img.size
    convert = _band_converter(img, path)
    rgb = np.empty((height, width, 3), np.uint8)
    alpha: np.ndarray | None = None
    for top in range(0, height, _BAND_ROWS):
        bottom = min(height, top + _BAND_ROWS)
        band = convert(img.crop((0, top, width, bottom)))  # (h, W, 3), or (h, W, 4): RGB over white + its alpha
        rgb[top:bottom] = band[:, :, :3]
        if band.shape[2] == 4 and (alpha is not None or band[:, :, 3].min(initial=255) < 255):
            if alpha is None:  # the first band that is not opaque: the rows above it were
                alpha = np.full((height, width), 255, np.uint8)
            alpha[top:bottom] = band[:, :, 3]
    return rgb, alpha


def _band_converter(img: Image.Image, path: Path) -> Callable[[Image.Image], np.ndarray]:
    """How a band of ``img`` becomes (h, W, 3) uint8 RGB ((h, W, 4) where it has transparency: the RGB composited
    over white, then the alpha)."""
    if img.mode in ("I;16", "I;16L", "I;16B", "I;16N", "I"):
        # Pillow's convert() clips these to 0..255; 16-bit images (and 'I', which 16-bit PNGs open as) span 0..65535.
        def wide(band: Image.Image) -> np.ndarray:
            values = np.asarray(band).astype(np.int64)
            return np.repeat(((np.clip(values, 0, 65535) + 128) // 257).astype(np.uint8)[:, :, None], 3, axis=2)

        return wide
    if img.mode == "F":
        values = np.asarray(img)  # 4 bytes a pixel, Pillow's own buffer: read once for the range
        if not np.isfinite(values).all():
            raise BadInputError(f"image '{path}' holds NaN or infinite pixel values; re-export it as 8- or 16-bit, "
                                f"{IMAGE_FIX}")  # fmt: skip
        scale = 255.0 if float(values.max(initial=0.0)) <= 1.0 else 1.0  # float images come as 0..1 or 0..255

        def floating(band: Image.Image) -> np.ndarray:
            gray = np.clip(np.rint(np.asarray(band, dtype=np.float32) * scale), 0, 255).astype(np.uint8)
            return np.repeat(gray[:, :, None], 3, axis=2)

        return floating
    if img.mode in ("RGBA", "RGBa", "LA", "La", "PA") or "transparency" in img.info:

        def over_white(band: Image.Image) -> np.ndarray:
            rgba = band.convert("RGBA")
            white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
            over = np.asarray(Image.alpha_composite(white, rgba))  # (h, W, 4), its alpha 255
            return np.concatenate([over[:, :, :3], np.asarray(rgba)[:, :, 3:]], axis=2)

        return over_white
    return lambda band: np.asarray(band.convert("RGB"))


def _edge_pad(rgb: np.ndarray) -> np.ndarray:
    height, width = rgb.shape[:2]
    side = max(height, width)
    pad_h, pad_w = side - height, side - width
    return np.pad(rgb, ((pad_h // 2, pad_h - pad_h // 2), (pad_w // 2, pad_w - pad_w // 2), (0, 0)), mode="edge")
