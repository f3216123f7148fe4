"""load_reference_image: every mode, orientation and broken file a user might hand in."""

from __future__ import annotations

import tracemalloc
import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from avatargen.errors import BadInputError
from avatargen.io.image import load_reference, load_reference_image, read_picture_and_alpha, save_png

SIZE = 64


def _load(path: Path, fit: str = "crop") -> np.ndarray:
    out = load_reference_image(path, SIZE, fit)
    assert out.dtype == np.uint8 and out.shape == (SIZE, SIZE, 3)
    return out


def _mean(rgb: np.ndarray) -> np.ndarray:
    return rgb.reshape(-1, 3).mean(axis=0)


@pytest.mark.parametrize(
    "mode, color, expected",
    [("RGB", (200, 30, 60), (200, 30, 60)), ("L", 90, (90, 90, 90)), ("1", 1, (255, 255, 255)),
     ("CMYK", (0, 255, 255, 0), (255, 0, 0)), ("P", None, (0, 0, 255))],
)  # fmt: skip
def test_opaque_modes_become_rgb(tmp_path: Path, mode: str, color: object, expected: tuple) -> None:
    if mode == "P":
        img = Image.new("RGB", (40, 40), (0, 0, 255)).convert("P")
    else:
        img = Image.new(mode, (40, 40), color)
    path = tmp_path / ("img.tif" if mode == "CMYK" else "img.png")
    img.save(path)
    np.testing.assert_allclose(_mean(_load(path)), expected, atol=2)


@pytest.mark.parametrize("mode", ["RGBA", "LA", "P"])
def test_transparency_is_composited_over_white(tmp_path: Path, mode: str) -> None:
    # Left half fully transparent (its hidden color is black), right half opaque black.
    if mode == "P":
        img = Image.new("P", (40, 40), 0)
        img.putpalette([0, 0, 0] * 2)  # both indices black; index 1 is the transparent one
        img.paste(1, (0, 0, 20, 40))
        img.info["transparency"] = 1
    else:
        rgba = Image.new("RGBA", (40, 40), (0, 0, 0, 0))
        rgba.paste((0, 0, 0, 255), (20, 0, 40, 40))
        img = rgba.convert(mode)
    img.save(tmp_path / "img.png")
    out = load_reference_image(tmp_path / "img.png", 40, "crop")
    assert (out[:, :20] == 255).all() and (out[:, 20:] == 0).all()
    # The opacity is kept beside the picture: the lips are judged as drawn (tests/face/test_lips.py).
    rgb, alpha = read_picture_and_alpha(tmp_path / "img.png")
    assert np.array_equal(rgb, out) and (alpha[:, :20] == 0).all() and (alpha[:, 20:] == 255).all()
    assert load_reference(tmp_path / "img.png", 40, "crop").alpha.shape == (40, 40)


@pytest.mark.parametrize("mode", ["RGB", "RGBA"])
def test_an_opaque_picture_has_no_alpha(tmp_path: Path, mode: str) -> None:
    Image.new(mode, (40, 40), (10, 20, 30, 255)[: len(mode)]).save(tmp_path / "img.png")
    assert read_picture_and_alpha(tmp_path / "img.png")[1] is None
    assert load_reference(tmp_path / "img.png", 40, "crop").alpha is None


@pytest.mark.parametrize("mode", ["I;16", "I"])
def test_16_bit_images_are_scaled_not_clipped(tmp_path: Path, mode: str) -> None:
    wide = np.full((40, 40), 32896, np.uint16)  # mid-grey in 16 bits: 128 * 257
    img = Image.fromarray(wide).convert(mode) if mode == "I" else Image.fromarray(wide)
    path = tmp_path / ("img.png" if mode == "I;16" else "img.tif")  # Pillow writes 32-bit 'I' only as TIFF
    img.save(path)
    with Image.open(path) as reopened:
        assert reopened.mode == mode
    np.testing.assert_array_equal(_load(path), 128)


def test_exif_orientation_is_applied(tmp_path: Path) -> None:
    # Stored landscape: left half red, right half blue. Orientation 6 means "rotate 90 degrees clockwise to view".
    stored = Image.new("RGB", (80, 40), (255, 0, 0))
    stored.paste((0, 0, 255), (40, 0, 80, 40))
    exif = Image.Exif()
    exif[0x0112] = 6
    stored.save(tmp_path / "photo.jpg", exif=exif, quality=95)
    out = load_reference_image(tmp_path / "photo.jpg", 40, "pad")  # pad keeps both halves
    top, bottom = _mean(out[:15]), _mean(out[-15:])
    assert top[0] > 200 and top[2] < 60  # viewed upright, red is on top
    assert bottom[2] > 200 and bottom[0] < 60


def test_animated_gif_gives_its_first_frame(tmp_path: Path) -> None:
    frames = [Image.new("RGB", (40, 40), c) for c in ((255, 0, 0), (0, 255, 0), (0, 0, 255))]
    frames[0].save(tmp_path / "anim.gif", save_all=True, append_images=frames[1:], duration=100, loop=0)
    np.testing.assert_allclose(_mean(_load(tmp_path / "anim.gif")), (255, 0, 0), atol=2)


def test_crop_takes_the_center_and_pad_replicates_edges(tmp_path: Path) -> None:
    img = np.zeros((40, 120, 3), np.uint8)
    img[:, :40] = (255, 0, 0)  # left third red, middle green, right blue
    img[:, 40:80] = (0, 255, 0)
    img[:, 80:] = (0, 0, 255)
    save_png(tmp_path / "wide.png", img)
    cropped = load_reference_image(tmp_path / "wide.png", 40, "crop")
    np.testing.assert_array_equal(cropped, np.broadcast_to(np.array([0, 255, 0], np.uint8), (40, 40, 3)))
    padded = load_reference_image(tmp_path / "wide.png", 120, "pad")
    np.testing.assert_array_equal(padded[:, 60:], np.broadcast_to(img[:1, 60:], (120, 60, 3)))  # rows repeated
    assert padded.shape == (120, 120, 3)


def test_unknown_fit_is_a_value_error(tmp_path: Path) -> None:
    save_png(tmp_path / "img.png", np.zeros((40, 40, 3), np.uint8))
    with pytest.raises(ValueError, match="fit"):
        load_reference_image(tmp_path / "img.png", SIZE, "stretch")


def test_missing_file_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="does not exist"):
        _load(tmp_path / "nope.png")


def test_text_file_named_png_is_bad_input(tmp_path: Path) -> None:
    (tmp_path / "face.png").write_text("hello, I am not a picture")
    with pytest.raises(BadInputError, match="not an image"):
        _load(tmp_path / "face.png")


def test_truncated_png_is_bad_input(tmp_path: Path) -> None:
    noise = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)  # incompressible
    save_png(tmp_path / "full.png", noise)
    data = (tmp_path / "full.png").read_bytes()
    (tmp_path / "cut.png").write_bytes(data[: len(data) // 2])
    with pytest.raises(BadInputError, match="corrupt or truncated") as err:
        _load(tmp_path / "cut.png")
    assert "\n" not in str(err.value)


def test_tiny_image_is_bad_input(tmp_path: Path) -> None:
    save_png(tmp_path / "tiny.png", np.zeros((10, 10, 3), np.uint8))
    with pytest.raises(BadInputError, match="too small to hold a face; give at least 32x32"):
        _load(tmp_path / "tiny.png")


def _png_header_only(path: Path, width: int, height: int) -> Path:
    """A PNG that says width x height and holds no pixel data: only a header-time check can refuse it cheaply."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b""))
    return path


@pytest.mark.parametrize(
    "width, height, fit, expected",
    [(32, 30000, "pad", "an aspect ratio over 4:1"), (32, 2_000_000, "crop", "an aspect ratio over 4:1"),
     (9000, 9000, "crop", "81 MP, over the limit of 64 MP"), (9000, 3000, "pad", "padded to a 9000x9000 square")],
)  # fmt: skip
def test_an_image_that_would_take_unbounded_memory_is_refused_from_its_header(tmp_path, width, height, fit, expected):
    path = _png_header_only(tmp_path / "bomb.png", width, height)
    with pytest.raises(BadInputError, match="bomb.png") as error:
        load_reference_image(path, SIZE, fit)
    assert expected in str(error.value)


def test_a_tall_but_small_image_with_pad_is_refused_before_padding(tmp_path):
    path = tmp_path / "tall.png"
    Image.new("L", (32, 30000), 128).save(path)  # a 10 kB file that pads to a 2.7 GB square
    with pytest.raises(BadInputError, match="at most 4:1"):
        load_reference_image(path, SIZE, "pad")


def test_a_float_tiff_with_nan_pixels_is_refused_in_one_line_without_a_numpy_warning(tmp_path):
    values = np.full((64, 64), 0.5, np.float32)
    values[20:40, 20:40] = np.nan
    path = tmp_path / "nan.tif"
    Image.fromarray(values, mode="F").save(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a RuntimeWarning from numpy's cast fails the test
        with pytest.raises(BadInputError, match="image '.*nan.tif' holds NaN or infinite pixel values; re-export it"):
            load_reference_image(path, 64, "crop")


def test_a_16_bit_image_is_converted_without_a_float_copy_of_the_picture(tmp_path):
    y, x = np.mgrid[0:1500, 0:1500]
    path = tmp_path / "wide.png"
    Image.fromarray(((x * 40 + y) % 65536).astype(np.uint16)).save(path)
    tracemalloc.start()
    try:
        load_reference_image(path, 64, "crop")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    rgb = 1500 * 1500 * 3
    assert peak < 2.5 * rgb, f"{peak / rgb:.1f}x the RGB picture (a float64 copy alone is 2.7x)"
