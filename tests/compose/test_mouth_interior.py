"""A photograph's open mouth shows teeth under the upper lip and the mouth's dark below them, in the picture's own
light: not a black hole, not the model's bright smear."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from avatargen.config.loader import load_config, to_config
from avatargen.io.image import load_reference, save_png
from avatargen.render import compositor_for
from tests.compose.test_speech_drive import RATE, _bursts
from tests.face import photos

_GREY = np.array([0.299, 0.587, 0.114])


def _loud_frame(tmp_path, picture: np.ndarray, generated_mouth=None) -> tuple[np.ndarray, object]:
    """Frame 15 (the middle of a loud burst) of ``picture`` composited with its mouth driven by the speech, and the
    warp; ``generated_mouth``: what to paint into the model's frames' mouth box (None: the reference square)."""
    wave, _ = _bursts()
    sf.write(tmp_path / "speech.wav", wave, RATE)
    save_png(tmp_path / "picture.png", picture)
    still = ["pipeline.idle_motion.head_motion=false", "pipeline.idle_motion.blinks_per_minute=0"]
    config = to_config(load_config(still))
    loaded = load_reference(tmp_path / "picture.png", 256, "face", lambda line: None)
    compositor = compositor_for(loaded, config, warn=lambda line: None, speech=tmp_path / "speech.wav")
    generated = loaded.square.copy()
    if generated_mouth is not None:
        generated_mouth(generated)
    return compositor.compose(generated[None], 15)[0], compositor


def _column_below_the_upper_lip(frame: np.ndarray, compositor) -> np.ndarray:
    """Grey levels down the mouth's middle from just above the lip line to the bottom of the opened gap."""
    warp = compositor.mouth
    x, y = np.rint(warp.lip_centre).astype(int)
    return frame[y - int(0.3 * warp.half) : y + int(1.0 * warp.half), x - 1 : x + 2].astype(float).mean(axis=1) @ _GREY


def _skin_grey(compositor) -> float:
    """The grey of the picture's cheeks: the median of two patches at the height of the nose's base, 0.3 face widths
    to either side of it (154 and 157 on Grace Hopper). Measured here from the detector's landmarks, not by the
    code's own cheek_skin, whose choice of skin these tests judge."""
    layout, grey = compositor.layout(), compositor.background.astype(float) @ _GREY
    (x, y), width = layout.points[4], layout.face_width
    r = int(0.04 * width)
    patches = [grey[int(y) - r : int(y) + r, int(x + side * width) - r : int(x + side * width) + r] for side in (-0.3, 0.3)]
    return float(np.median(np.concatenate([patch.ravel() for patch in patches])))


@pytest.mark.parametrize("kind", ["colour", "greyscale", "bearded"])
def test_a_closed_mouth_opens_over_teeth_and_the_dark_of_the_mouth(tmp_path, kind):
    """Grace Hopper shows no teeth; opened by the speech she shows pale teeth under her upper lip, then the dark of
    her mouth (the old warp drew one dark hole there); a greyscale photo gets grey teeth; with a dark beard round her
    mouth, teeth as pale as without (the teeth's tone comes from the cheeks, not from the mouth's sides)."""
    picture = photos.bearded() if kind == "bearded" else photos.grace_hopper()
    if kind == "greyscale":
        picture = np.repeat((picture @ _GREY).round().astype(np.uint8)[..., None], 3, axis=2)
    frame, compositor = _loud_frame(tmp_path, picture)
    column = _column_below_the_upper_lip(frame, compositor)
    if kind == "bearded":  # her skin measured on the beardless picture, which the beard cannot darken
        clean, clean_compositor = _loud_frame(tmp_path, photos.grace_hopper())
        skin = _skin_grey(clean_compositor)
    else:
        skin = _skin_grey(compositor)
    dark = np.convolve(column < 0.5 * skin, np.ones(3), mode="valid") == 3  # three dark rows from here on
    assert dark.any(), (column.round(), skin)  # the mouth's dark ...
    start = int(np.argmax(dark))
    assert (column[start - 4 : start] > 0.85 * skin).sum() >= 3, (column.round(), skin)  # ... under teeth
    if kind == "greyscale":  # no colour comes from anywhere but the picture
        assert np.abs(frame.astype(int) - frame[..., :1]).max() <= 1
    if kind == "bearded":  # as pale as her teeth without the beard (measured: 150 against 159)
        without = _column_below_the_upper_lip(clean, clean_compositor)
        clean_start = int(np.argmax(np.convolve(without < 0.5 * skin, np.ones(3), mode="valid") == 3))
        assert column[start - 4 : start].max() >= 0.85 * without[clean_start - 4 : clean_start].max()


def test_an_underexposed_photo_gets_dim_teeth_whatever_the_model_draws(tmp_path):
    """The astronaut underexposed (her face at 40-90 grey levels), while the model's frames draw a bright blob in the
    mouth (as the bundled model does on dark photos): the opened mouth is no brighter than her own teeth, in the
    picture's light (the old warp pasted the blob as a glowing patch of teeth)."""
    dark = (255.0 * (photos.astronaut() / 255.0) ** 1.8 * 0.45).astype(np.uint8)

    def blob(square: np.ndarray) -> None:
        side = square.shape[0]
        square[int(0.58 * side) : int(0.64 * side), int(0.44 * side) : int(0.56 * side)] = 250

    frame, compositor = _loud_frame(tmp_path, dark, blob)
    changed = np.abs(frame.astype(int) - compositor.background).max(axis=2) > 0
    assert changed.sum() > 50  # the mouth opened
    grey = frame @ _GREY
    skin = _skin_grey(compositor)
    assert grey[changed].max() < 2.0 * skin, (grey[changed].max(), skin)  # dim teeth: her own are ~1.5x her skin
    column = _column_below_the_upper_lip(frame, compositor)
    assert (column > 1.2 * skin).sum() >= 2, (column.round(), skin)  # ... but teeth all the same


def test_a_sepia_print_gets_sepia_teeth(tmp_path):
    """Grace Hopper as a sepia print: the teeth drawn in her opened mouth have the print's own tint (they were
    drawn with a third of her skin's, a grey-lilac on the brown print), and no tooth-edge shows as a dark notch."""
    grey = photos.grace_hopper() @ _GREY
    sepia = np.clip(grey[..., None] * np.array([1.12, 0.97, 0.74]), 0, 255).astype(np.uint8)
    frame, compositor = _loud_frame(tmp_path, sepia)
    warp = compositor.mouth
    x, y = np.rint(warp.lip_centre).astype(int)
    skin = _skin_grey(compositor)
    column = _column_below_the_upper_lip(frame, compositor)  # from 0.3 half-widths above the lip line
    dark = int(np.argmax(np.convolve(column < 0.5 * skin, np.ones(3), mode="valid") == 3))  # the mouth's dark
    top = y - int(0.3 * warp.half)
    rows = slice(top + dark - 4, top + dark)  # the rows above it: the teeth (test_a_closed_mouth_opens_over_teeth)
    pixels = frame[rows, x - int(0.2 * warp.half) : x + int(0.2 * warp.half)].reshape(-1, 3).astype(float)
    teeth = pixels[pixels @ _GREY > 0.85 * skin]
    assert len(teeth) >= 8, len(teeth)
    tint = np.median(teeth / (teeth @ _GREY)[:, None], axis=0)
    assert np.abs(tint - np.array([1.12, 0.97, 0.74]) / (np.array([1.12, 0.97, 0.74]) @ _GREY)).max() < 0.04, tint
