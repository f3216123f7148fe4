"""The warped mouth is drawn where the photo's lips are: dark pixels only within the lips' reach (avatargen eval's
mouth spill), a smile shut in silence, the contour carried by the head's idle motion, and the still picture's
mouth kept where the lips do not show."""

from __future__ import annotations

import numpy as np
import pytest

from avatargen.compose.mouth_choice import mouth_for
from avatargen.errors import BadInputError
from avatargen.face.lips import OTHER_FACE, LipSearch
from avatargen.compose.mouth_warp import MouthWarp
from avatargen.config.loader import load_config, to_config
from avatargen.eval.mouth_spill import MouthSpill
from avatargen.face.choice import reference_lips
from avatargen.face.detector import shared_detector
from avatargen.io.image import load_reference, save_png
from avatargen.render import compositor_for
from tests.face import photos

S = 256


def _composited(tmp_path, picture: np.ndarray, *overrides: str):
    """The compositor a render builds for ``picture``, its loaded reference and the warnings it printed."""
    save_png(tmp_path / "reference.png", picture)
    config = to_config(load_config(["pipeline.idle_motion.head_motion=false", "pipeline.idle_motion.blinks_per_minute=0",
                                    *overrides]))  # fmt: skip
    lines: list[str] = []
    loaded = load_reference(tmp_path / "reference.png", S, "face", lines.append)
    return compositor_for(loaded, config, warn=lines.append), loaded, lines


def _talking(square: np.ndarray, count: int = 6) -> np.ndarray:
    """(count, S, S, 3): the model's input square with its mouth drawn shut, then ever wider open, as the bundled
    model draws a photo's open mouth: a smear of colour unlike the skin (here a dark violet)."""
    frames = np.repeat(square[None], count, axis=0).copy()
    rows, cols = slice(int(0.53 * S), int(0.70 * S)), slice(int(0.38 * S), int(0.62 * S))
    frames[:, rows, cols] = np.median(square[int(0.50 * S), cols], axis=0)  # shut
    for i in range(1, count):
        height = int(0.012 * S * i)
        frames[i, int(0.60 * S) - height : int(0.60 * S) + height, int(0.44 * S) : int(0.56 * S)] = (70, 30, 90)
    return frames


def _spill(picture: np.ndarray, frames: np.ndarray) -> list[float]:
    """Per-frame mouth spill of ``frames`` against ``picture`` (avatargen eval's measure)."""
    detector = shared_detector()
    face = detector.find(picture)
    lips = reference_lips(picture, face).lips
    spill = MouthSpill(picture, face, lips)
    for frame in frames:
        spill.update(frame, detector.find(frame))
    return spill.spill


@pytest.mark.parametrize("name", ["tilted", "half_body"])
def test_the_cavity_opens_between_the_lips_and_nowhere_else(tmp_path, name):
    picture = photos.TEST_PHOTOS[name]()
    compositor, loaded, _ = _composited(tmp_path, picture)
    assert isinstance(compositor.mouth, MouthWarp)
    frames = compositor.compose(_talking(loaded.square), 0)
    # shut: the reference (its smile closed: compose/mouth_close.py); open: a cavity
    darkened = (compositor.background.astype(int) - frames.astype(int)).max(axis=3) > 40  # (t, H, W)
    assert darkened[0].sum() == 0 and darkened[-1].sum() > 20
    assert max(_spill(picture, frames)) < 0.15, name  # every frame's darkening lies within the lips' reach


def test_a_smile_is_shut_in_silence_and_opened_by_the_speech(tmp_path):
    picture = photos.astronaut()
    compositor, loaded, _ = _composited(tmp_path, picture)
    found = reference_lips(picture, shared_detector().find(picture)).lips
    frames = compositor.compose(_talking(loaded.square), 0)
    # Her upper teeth in the photo: just under the upper inner lip, at the middle of the mouth.
    x, y = np.rint(found.inner[15] + 0.35 * (found.inner[5] - found.inner[15])).astype(int)
    assert picture[y, x].min() > 150  # pale in the photo
    chroma = lambda rgb: int(rgb.max()) - int(rgb.min())  # noqa: E731  (teeth are pale, lips pink)
    assert chroma(frames[0][y, x]) > chroma(picture[y, x]) + 12  # shut: her lips meet over them
    lips = compositor.mouth.lips
    gap = np.rint(lips.centre + 0.45 * compositor.mouth.half * lips.down).astype(int)  # under the teeth, open
    assert frames[-1][gap[1], gap[0]].max() < frames[0][gap[1], gap[0]].max() - 40  # open: the interior shows


def test_with_idle_motion_the_mouth_moves_with_the_head(tmp_path):
    picture = photos.tilted()
    save_png(tmp_path / "reference.png", picture)
    config = to_config(load_config(["pipeline.idle_motion.blinks_per_minute=0"]))
    loaded = load_reference(tmp_path / "reference.png", S, "face", lambda line: None)
    compositor = compositor_for(loaded, config, warn=lambda line: None)
    talking = _talking(loaded.square)
    frames = np.concatenate([compositor.compose(talking[i : i + 1], index) for i, index in enumerate((0, 40, 80, 120, 160, 200))])
    moved = [np.abs(frames[i].astype(int) - picture).mean() for i in range(len(frames))]
    assert max(moved) > 0.5  # the head sways
    # (0.156 at frame 40, a small opening: the chin's edge, which the jaw now carries down a few pixels, counts as
    # darkening beyond the lips' reach; the frame shows none)
    assert max(_spill(picture, frames)) < 0.2


@pytest.mark.parametrize("make", [photos.hand_over_mouth, photos.masked], ids=["hand", "mask"])
def test_a_face_whose_lips_do_not_show_is_refused_in_one_line_never_rendered_frozen(tmp_path, make):
    with pytest.raises(BadInputError, match=r"^the mouth of the face cannot be found \(no face mesh fits the face\): .*"
                                            "give a picture whose mouth shows") as refused:
        _composited(tmp_path, make())
    assert "\n" not in str(refused.value)


def test_where_the_mesh_fits_another_face_the_mouth_placed_from_the_landmarks_still_talks(tmp_path):
    """What a stylised cartoon got from the face mesh once (its mouth stayed as in the picture): its lips now come
    from the detector's five landmarks, said in one line, and the mouth opens with the speech."""
    picture = photos.grace_hopper()
    compositor, loaded, _ = _composited(tmp_path, picture)
    compositor.background = compositor.background.copy()
    lines: list[str] = []
    compositor.mouth = mouth_for(compositor, compositor.layout(), LipSearch(None, OTHER_FACE), True, True,
                                 loaded.square, lines.append)  # fmt: skip
    assert isinstance(compositor.mouth, MouthWarp) and len(lines) == 1 and "five landmarks" in lines[0], lines
    frames = compositor.compose(_talking(loaded.square), 0)
    grey = frames.astype(float) @ np.array([0.299, 0.587, 0.114])  # (t, H, W)
    found = reference_lips(picture, shared_detector().find(picture)).lips  # where her lips are
    dark = (grey[-1] < 80) & (grey[0] > 110)  # the open mouth's dark, where her shut lips were lit ...
    x, y = np.rint(found.centre).astype(int)
    reach = int(found.width)
    dark[: y - reach], dark[y + reach :], dark[:, : x - reach], dark[:, x + reach :] = False, False, False, False
    rows, cols = np.nonzero(dark)  # ... within a mouth width of her lips (the jaw moves the chin's shadow too)
    assert dark.sum() > 0.1 * found.width**2, dark.sum()
    # the gap opens under her lip line (the lower lip moves most): its middle a little below the lips' centre
    assert 0.0 <= rows.mean() - found.centre[1] < 0.4 * found.width and abs(cols.mean() - found.centre[0]) < 0.1 * found.width


def test_a_cartoon_grinning_open_is_closed_in_pauses_and_opened_by_the_speech(tmp_path):
    """A cartoon whose own mouth is open (a grin over its teeth) was blended: the model's mouth, open in every pause
    (a stylised 3-D cartoon's grin never closed). With the speech file it is closed first and the speech opens it,
    as a photograph's is; without one (a stream), it is still blended."""
    import soundfile as sf

    from tests.compose.test_speech_drive import RATE, _bursts

    picture = photos.smiling_render()
    wave, silent = _bursts()
    sf.write(tmp_path / "speech.wav", wave, RATE)
    save_png(tmp_path / "reference.png", picture)
    config = to_config(load_config(["pipeline.idle_motion.head_motion=false", "pipeline.idle_motion.blinks_per_minute=0"]))
    loaded = load_reference(tmp_path / "reference.png", S, "face", lambda line: None)
    assert compositor_for(loaded, config, warn=lambda line: None).mouth is None  # streamed speech: the blend
    compositor = compositor_for(loaded, config, warn=lambda line: None, speech=tmp_path / "speech.wav")
    assert isinstance(compositor.mouth, MouthWarp) and compositor.mouth.drive is not None
    frames = compositor.compose(np.repeat(loaded.square[None], 50, axis=0), 0)  # the model's frames: the grin itself
    lips = compositor.mouth.lips
    x0, y0 = np.floor(lips.outer.min(axis=0)).astype(int)
    x1, y1 = np.ceil(lips.outer.max(axis=0)).astype(int) + 1
    mouth = (slice(y0, y1 + int(0.5 * lips.width)), slice(x0, x1))
    closed = compositor.background[mouth].astype(int)
    assert np.abs(closed - picture[mouth]).mean() > 10  # the grin closed ...
    for pause in np.flatnonzero(silent)[[2, -3]]:
        assert np.array_equal(frames[pause][mouth], compositor.background[mouth]), pause  # ... in the pauses
    assert np.abs(frames[15][mouth].astype(int) - closed).mean() > 10  # open on a loud frame


@pytest.mark.parametrize("turned", [True, False])
def test_a_turned_faces_drawn_teeth_centre_on_its_lips_midline(tmp_path, monkeypatch, turned):
    """Grace Hopper turned ~30 degrees (the face mesh's nose 0.81 of the way across, as a real turn): her lips'
    midline lies 0.16 half-widths past the corners' midpoint, towards the far corner. Her drawn teeth move most of the
    way there from where they were, centred between the corners, as a viewer expects them under the nose (her
    opening's lens centres there too: portrait_judge.py's dlib figures). A face that looks at the camera keeps its
    mouth as it was, pixel for pixel."""
    from avatargen.compose import mouth_warp
    from tests.eval import clips

    picture = photos.yawed(clips.grace_hopper(), (250, 230), 110.0, 45.0) if turned else clips.grace_hopper()
    centres, frames = [], []
    for midline_from in (mouth_warp.TURNED_MIDLINE, float("inf")):  # as built, then centred between the corners
        monkeypatch.setattr(mouth_warp, "TURNED_MIDLINE", midline_from)
        compositor, loaded, _ = _composited(tmp_path, picture)
        mouth = compositor.mouth
        assert isinstance(mouth, MouthWarp)
        lips, half = mouth.lips, mouth.half
        along = lambda points: (np.asarray(points, float) - lips.centre) @ lips.along / half  # noqa: E731
        midline = float(np.median(along(lips.middles)))
        frame = compositor.compose(_talking(loaded.square), 0)[-1].astype(float)  # the widest opening
        near = lambda image: np.linalg.norm(image - mouth._anatomy.teeth, axis=2)  # noqa: E731 (her teeth's colour)
        ys, xs = np.nonzero((near(frame) < 25) & (near(compositor.background.astype(float)) > 60))  # drawn teeth
        assert len(xs) > 30, len(xs)
        centres.append(float(along(np.stack([xs, ys], axis=1)).mean()))
        frames.append(frame)
    if turned:
        assert midline > 0.12 and centres[0] - centres[1] > 0.4 * midline, (midline, centres)
    else:
        assert abs(midline) < mouth_warp.TURNED_MIDLINE, midline
        np.testing.assert_array_equal(frames[0], frames[1])
