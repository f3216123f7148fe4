"""``pipeline.mouth=warp``: the reference's own lips and jaw move by the generated mouth's opening; only the mouth's
interior comes from the model frame."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from avatargen.compose.composite import ReferenceCompositor
from avatargen.compose.layout import FaceLayout
from avatargen.compose.mouth_warp import (
    JAW_STILL_BELOW,
    LOWER_SHARE,
    SHUT_OPENING_MAX,
    ModelMapping,
    MouthCue,
    MouthWarp,
    estimated_lips,
    mouth_opening,
    shut_mouth,
    still_opening,
)
from avatargen.data import FacePose, FaceRenderer, identity_from_seed
from avatargen.face.choice import reference_lips
from avatargen.face.detector import shared_detector
from tests.conftest import REPO, run_cli

S = 256
SEED = 1_000_000  # a held-out identity (examples/avatar_1.png)
_GREY = np.array([0.299, 0.587, 0.114])


def _frame(**pose) -> np.ndarray:
    return FaceRenderer(identity_from_seed(SEED), S).render(FacePose(**pose))[0]


@pytest.fixture(scope="module")
def warp_setup():
    """A training-style avatar as the reference, taken whole (the model's framing), its mouth moved by ``MouthWarp``
    where the five landmarks of the training layout put its lips (a render without the lip finder)."""
    reference = _frame()
    compositor = ReferenceCompositor(reference, (0, 0, S), S)
    lips = estimated_lips(compositor.background, FaceLayout.canonical(S))
    compositor.mouth = MouthWarp(compositor.background, lips, ModelMapping(*compositor.model_pixel_mapping()),
                                 still=reference)  # fmt: skip
    return reference, compositor


def _lower_lip_bottom(frame: np.ndarray, column: int, lip_line: int, skin_row: int) -> int:
    """The last row of lip colour (red over green, past halfway from the skin's to the lip's) in ``column`` within
    45 rows below the ``lip_line``: the lower lip's lower edge."""
    redness = frame[:, column, 0].astype(int) - frame[:, column, 1].astype(int)  # (S,)
    window = redness[lip_line : lip_line + 45]
    halfway = 0.5 * (redness[skin_row] + window.max())
    return lip_line + int(np.nonzero(window > halfway)[0].max())


def test_a_closed_generated_mouth_leaves_the_reference_as_it_is(warp_setup):
    reference, compositor = warp_setup
    closed = np.stack([_frame(), _frame(mouth_open=0.02)])  # the model's shut mouth (and a barely parted one)
    assert (compositor.mouth.openings(closed)[0] == 0).all()
    out = compositor.compose(closed, 0)
    assert np.array_equal(out[0], reference) and np.abs(out[1].astype(int) - reference).max() <= 1


def test_an_open_generated_mouth_moves_the_reference_lower_lip_down_with_a_dark_interior(warp_setup):
    reference, compositor = warp_setup
    mouth = compositor.mouth
    generated = _frame(mouth_open=1.0)[None]
    opening = float(mouth.openings(generated)[0][0])
    assert opening > 4  # pixels: a wide-open mouth reads wide open
    out = compositor.compose(generated, 0)[0]
    x, y = np.rint(mouth.lip_centre).astype(int)
    before, after = _lower_lip_bottom(reference, x, y, y - 20), _lower_lip_bottom(out, x, y, y - 20)
    assert after - before == pytest.approx(LOWER_SHARE * opening, abs=1.5)  # the reference's own lip, moved down
    gap = y + round(0.5 * (LOWER_SHARE - (1 - LOWER_SHARE)) * opening)  # the middle of the gap between the lips
    skin = reference[y - 30, x] @ _GREY
    assert out[gap, x] @ _GREY < 0.4 * skin  # the interior is a dark cavity
    top, bottom, left, right = mouth.box
    outside = np.ones(reference.shape[:2], bool)
    outside[top:bottom, left:right] = False
    assert np.array_equal(out[outside], reference[outside])  # nothing outside the mouth and jaw box changes
    assert np.array_equal(out[: y - 25], reference[: y - 25])  # nor the nose, eyes and hair above it


def test_the_opening_follows_the_generated_mouth_and_depends_on_nothing_else():
    shut = shut_mouth(_frame())  # the reference's shut mouth
    openings = mouth_opening(np.stack([_frame(mouth_open=a) for a in (0.0, 0.3, 0.6, 1.0)]), shut=shut).opening
    assert openings[0] == 0 and (np.diff(openings) > 0).all()  # wider in the model frame: wider in the output
    alone = [mouth_opening(_frame(mouth_open=a)[None], shut=shut).opening[0] for a in (0.6, 1.0)]
    assert np.allclose(alone, openings[2:])  # each frame a function of itself: chunking and resume cannot change it


def test_what_the_shut_reference_shows_bright_never_reads_as_teeth_and_a_wide_mouth_still_opens():
    """The cartoon cue reads teeth (pixels brighter than the skin: on dark skin they stand out more than the
    cavity); what the shut reference already shows that bright (here the pale backdrop under a short chin) must not
    open the mouth, and a wide-open mouth still reads wide open."""
    renderer = FaceRenderer(identity_from_seed(21), S)  # a training identity with a short chin over a pale backdrop
    shut, wide = (renderer.render(FacePose(mouth_open=a))[0] for a in (0.0, 0.8))
    assert mouth_opening(shut[None]).opening[0] > 5.0  # read alone, the backdrop would open the mouth
    openings = mouth_opening(np.stack([shut, wide]), shut=shut_mouth(shut)).opening
    assert openings[0] == 0 and openings[1] > 10.0, openings


def test_auto_blends_a_cartoon_whose_shut_mouth_the_cue_reads_open_and_warps_the_rest():
    """A dark beard reads as a dark cavity with the mouth shut: no opening could be told, so ``auto`` blends it."""
    bearded = FaceRenderer(identity_from_seed(31), S).render(FacePose())[0]
    assert still_opening(bearded) > SHUT_OPENING_MAX
    for name in ("avatar_1", "avatar_2", "avatar_3"):
        square = np.asarray(Image.open(REPO / "examples" / f"{name}.png").convert("RGB"))
        assert still_opening(square) <= SHUT_OPENING_MAX, name


def test_on_a_photograph_a_coloured_smear_reads_open_and_plain_skin_closed():
    skin = np.full((2, S, S, 3), (214, 172, 152), np.uint8)  # the astronaut's skin tone, no mouth drawn
    skin[1, int(0.57 * S) : int(0.63 * S), int(0.44 * S) : int(0.56 * S)] = (150, 120, 190)  # a bluish smear, not dark
    assert mouth_opening(skin, MouthCue.dark).opening.tolist() == [0.0, 0.0]  # no cavity: the dark cue misses it
    shut, smeared = mouth_opening(skin, MouthCue.colour).opening
    assert shut == 0.0 and smeared > 2.0  # model pixels


def test_frames_composited_in_any_batches_are_the_same_pixels(warp_setup):
    _, compositor = warp_setup
    frames = np.stack([_frame(mouth_open=a) for a in (0.0, 0.8, 0.4, 1.0, 0.1)])
    whole = compositor.compose(frames, 0)
    parts = np.concatenate([compositor.compose(frames[:2], 0), compositor.compose(frames[2:], 2)])
    assert np.array_equal(whole, parts)  # no state across frames: a resumed render continues bit-exact
    assert not np.array_equal(whole[1], whole[0])


def test_a_photograph_keeps_its_own_lip_and_chin_pixels_and_its_collar():
    from avatargen.face.framing import frame_face
    from tests.eval import clips

    photo = clips.astronaut()  # (512, 512, 3)
    framing = frame_face(photo, lambda line: None)
    compositor = ReferenceCompositor(photo, framing.square, S, framing.face)
    lips = compositor.to_output(reference_lips(photo, framing.face).lips)
    mouth = MouthWarp(compositor.background, lips, ModelMapping(*compositor.model_pixel_mapping()))
    compositor.mouth = mouth
    generated = np.stack([_resize(framing.crop)] * 2)  # the model's input ...
    mouth_box = (slice(int(0.53 * S), int(0.70 * S)), slice(int(0.38 * S), int(0.62 * S)))
    generated[:, mouth_box[0], mouth_box[1]] = np.median(generated[0, int(0.50 * S), mouth_box[1]], axis=0)  # shut
    generated[1, int(0.57 * S) : int(0.63 * S), int(0.45 * S) : int(0.55 * S)] = 20  # ... and drawn wide open
    shut, wide = compositor.compose(generated, 0)
    assert np.array_equal(shut, photo)  # a closed generated mouth: the photo itself
    top, bottom, left, right = mouth.box
    changed = np.nonzero(np.abs(wide.astype(int) - photo).max(axis=2) > 2)
    assert changed[0].min() >= top and changed[0].max() < bottom and changed[1].min() >= left and changed[1].max() < right
    x, y = np.rint(mouth.lip_centre).astype(int)
    still = y + int(np.ceil((JAW_STILL_BELOW + 0.3) * mouth.half)) + 1  # where the jaw's motion has faded out
    assert still < 512 - 100 and np.array_equal(wide[still:], photo[still:])  # the collar and the body stay put
    # Below the gap, the lower lip and chin are the photo's own pixels moved down, their detail kept.
    down = round(LOWER_SHARE * mouth.openings(generated[1:])[0][0])
    assert down >= 3
    rows, cols = slice(y + down + 2, y + down + 20), slice(x - 8, x + 9)
    moved = wide[rows, cols].astype(float)
    shifted = photo[rows.start - down : rows.stop - down, cols].astype(float)  # where those pixels came from
    assert np.abs(moved - shifted).mean() < 0.5 * np.abs(moved - photo[rows, cols]).mean()
    assert _detail(moved) > 0.6 * _detail(shifted)  # bicubic at sub-pixel shifts and the jaw's stretch: 0.76


def _detail(patch: np.ndarray) -> float:
    """Variance of the grey Laplacian of an (h, w, 3) patch: fine detail."""
    grey = patch @ _GREY
    return float((grey[1:-1, :-2] + grey[1:-1, 2:] + grey[:-2, 1:-1] + grey[2:, 1:-1] - 4 * grey[1:-1, 1:-1]).var())


def _resize(image: np.ndarray) -> np.ndarray:
    return np.asarray(Image.fromarray(image).resize((S, S), Image.Resampling.LANCZOS))


def test_a_bad_mouth_mode_is_refused_in_one_line(tmp_path):
    result = run_cli("render", "-i", str(REPO / "examples" / "avatar_1.png"), "-a", str(REPO / "examples" / "speech_1.flac"),
                     "-o", str(tmp_path / "out.mp4"), "pipeline.mouth=lips")  # fmt: skip
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "pipeline.mouth" in lines[0] and "blend, warp" in lines[0]
    assert not (tmp_path / "out.mp4").exists()


def _vertical_shift(before: np.ndarray, after: np.ndarray, centre: np.ndarray, half: tuple[int, int],
                    reach: int) -> int:  # fmt: skip
    """How many pixels down the patch of ``before`` around ``centre`` (x, y), ``half`` (x, y) pixels to each side,
    shows in ``after``: the shift in 0..``reach`` whose patch differs least."""
    x, y = np.rint(centre).astype(int)
    patch = before[y - half[1] : y + half[1] + 1, x - half[0] : x + half[0] + 1].astype(float)
    errors = [np.abs(after[y + k - half[1] : y + k + half[1] + 1, x - half[0] : x + half[0] + 1] - patch).mean()
              for k in range(reach + 1)]  # fmt: skip
    return int(np.argmin(errors))


def test_a_photographs_jaw_opens_the_chin_goes_down_with_the_lower_lip_which_keeps_its_shape():
    """Opened by the speech, a photograph's lower lip and chin move down together (a jaw that opens; it once
    stretched the lower lip into a V under a chin that moved an eighth as far), and the lips part as a lens: half
    way to a corner the lower lip is down most of the way the middle is (a V: half)."""
    from tests.eval import clips

    photo = clips.grace_hopper()
    lips = reference_lips(photo, shared_detector().find(photo)).lips
    mouth = MouthWarp(photo, lips, ModelMapping((1.0, 1.0), (0.0, 0.0)), MouthCue.colour)
    opening = 0.6 * mouth.half  # the speech level's opening (DRIVE_OPENING_HALF_WIDTHS)
    top, bottom, left, right = mouth.box
    opened = photo.copy()
    opened[top:bottom, left:right] = mouth._open_mouth(np.zeros((S, S, 3), np.uint8), opening, np.zeros(2), (200.0, 20.0))
    reach, half = int(np.ceil(opening)) + 2, mouth.half
    chin = _vertical_shift(photo, opened, mouth.lip_centre + 2.0 * half * lips.down, (12, 6), reach)
    lip_middle = _vertical_shift(photo, opened, mouth.lip_centre + 0.3 * half * lips.down, (4, 3), reach)
    lip_side = [_vertical_shift(photo, opened, mouth.lip_centre + half * (0.3 * lips.down + side * 0.5 * lips.along),
                                (4, 3), reach) for side in (-1, 1)]  # fmt: skip
    assert chin >= opening / 3, (chin, opening)
    assert lip_middle >= 0.6 * LOWER_SHARE * opening and min(lip_side) >= 0.7 * lip_middle, (lip_middle, lip_side)
