"""Reference compositing: the reference's own pixels everywhere but the generated mouth and jaw."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from avatargen.compose.composite import MOUTH_REGION, ReferenceCompositor, output_size
from avatargen.data import FacePose, FaceRenderer, identity_from_seed
from avatargen.face.detector import Face

S = 64  # model frame side in these tests


def _picture(height: int, width: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def _mouth_pixel(square: tuple[int, int, int]) -> tuple[int, int]:
    """(row, column) in the picture of the mouth ellipse's centre for crop ``square``."""
    left, top, side = square
    return int(top + MOUTH_REGION.centre[1] * side), int(left + MOUTH_REGION.centre[0] * side)


def test_only_the_mouth_comes_from_the_model_the_rest_is_the_picture_at_its_own_size():
    picture = _picture(301, 420)  # non-square, odd height
    square = (150, 40, 200)
    compositor = ReferenceCompositor(picture, square, S)
    assert compositor.size == (300, 420)  # the picture's size, made even for H.264
    generated = np.random.default_rng(1).integers(100, 156, (3, S, S, 3), dtype=np.uint8)  # skin-like texture
    mouth = (slice(int(0.58 * S), int(0.63 * S)), slice(int(0.45 * S), int(0.55 * S)))
    generated[0][mouth], generated[1][mouth] = 0, 255  # shut and open
    out = compositor.compose(generated, 0)
    assert out.shape == (3, 300, 420, 3)
    changed = (out != picture[None, :300]).any(axis=(0, 3))  # (H', W')
    rows, cols = np.nonzero(changed)
    # Every changed pixel lies in the feathered mouth ellipse of the crop square, nowhere else.
    fx, fy = (cols + 0.5 - square[0]) / square[2], (rows + 0.5 - square[1]) / square[2]
    (cx, cy), (ax, ay), grow = MOUTH_REGION.centre, MOUTH_REGION.half_axes, MOUTH_REGION.feather
    assert (((fx - cx) / (ax + grow)) ** 2 + ((fy - cy) / (ay + grow)) ** 2 <= 1.0 + 1e-6).all()
    row, col = _mouth_pixel(square)
    assert changed[row, col] and out[0, row, col].mean() < out[1, row, col].mean()  # dark frame darker there


def test_generated_colours_are_matched_to_the_skin_around_the_mouth():
    skin = np.full((240, 240, 3), (200, 150, 120), np.uint8)
    compositor = ReferenceCompositor(skin, (0, 0, 240), S)
    generated = np.full((1, S, S, 3), (120, 110, 90), np.uint8)  # the model's skin, another tone
    generated[0, 36:40, 24:40] = (60, 20, 30)  # and a mouth
    out = compositor.compose(generated, 0)[0].astype(int)
    ring = np.abs(out - skin.astype(int)).max(axis=2)
    row, col = _mouth_pixel((0, 0, 240))
    assert ring[row - 12 : row + 12, :].max() > 40  # the mouth is there
    # Away from the mouth (the upper half of the ellipse is skin in the model's frame), no tone jump.
    assert ring[row - 25, col] <= 3 and ring[row, col - 40] <= 3


def test_a_large_picture_is_scaled_to_max_side_and_a_square_leaving_the_image_is_clipped():
    assert output_size(3000, 2001, 1280) == (1280, 854)
    assert output_size(511, 512, 1280) == (510, 512)
    picture = _picture(600, 900)
    face = Face(box=(700, 300, 800, 400), points=np.array([[780.0, 340], [760, 340], [720, 340], [740, 340], [750, 370]]), score=1.0)
    compositor = ReferenceCompositor(picture, (640, 250, 300), S, face, max_side=450)  # reaches past the right edge
    assert compositor.size == (300, 450)
    out = compositor.compose(np.zeros((1, S, S, 3), np.uint8), 0)
    assert out.shape == (1, 300, 450, 3)
    layout = compositor.layout()
    assert layout is not None and np.allclose(layout.points[4], (375 - 0.25, 185 - 0.25), atol=0.5)
    assert layout.face_width == pytest.approx(50, abs=0.2)
    assert ReferenceCompositor(picture, (640, 250, 300), S).layout() is None


def test_warp_sees_every_composited_frame_with_its_absolute_index():
    seen: list[int] = []

    def shift(frame: np.ndarray, index: int) -> np.ndarray:
        seen.append(index)
        return np.roll(frame, 1, axis=1)

    picture = _picture(128, 128)
    compositor = ReferenceCompositor(picture, (0, 0, 128), S, warp=shift)
    out = compositor.compose(np.zeros((4, S, S, 3), np.uint8), 40)
    assert seen == [40, 41, 42, 43]
    assert np.array_equal(out[0, :, 1:][:10], picture[:10, :-1])  # the warp moved the frame


def test_the_mask_holds_the_mouth_of_training_identities_at_its_widest():
    """MOUTH_REGION was measured on seeds 0-59 (benchmarks/quality/mouth_region.py); held-out identities fit it too."""
    for seed in (1_000_000, 1_000_003, 1_000_009, 5, 17):
        frame, _ = FaceRenderer(identity_from_seed(seed), 256).render(FacePose(mouth_open=1.0, mouth_width=1.3))
        compositor = ReferenceCompositor(frame, (0, 0, 256), 256)
        weight = np.zeros(compositor.size, np.float32)
        y0, y1, x0, x1 = compositor._box
        weight[y0:y1, x0:x1] = compositor._weight[0, :, :, 0]
        neutral = FaceRenderer(identity_from_seed(seed), 256).render(FacePose())[0]
        moved = np.abs(frame.astype(int) - neutral.astype(int)).max(axis=2) > 8  # what talking changed
        assert weight[moved].min() > 0.5, seed  # inside the mask, not at its feathered edge


def test_idle_motion_plugs_into_the_warp_hook_at_the_output_size():
    from avatargen.compose.idle_motion import IdleMotion
    from avatargen.face.framing import frame_face
    from tests.eval import clips

    photo = clips.astronaut()[20:420, 40:480]  # (400, 440, 3)
    framing = frame_face(photo, lambda line: None)
    compositor = ReferenceCompositor(photo, framing.square, S, framing.face)
    layout = compositor.layout()
    assert layout is not None
    compositor.warp = IdleMotion(layout, compositor.size, 25, seed=0).warp
    generated = np.asarray(Image.fromarray(framing.crop).resize((S, S)))[None]  # (1, S, S, 3): the model's input
    first, later = compositor.compose(generated, 0)[0], compositor.compose(generated, 60)[0]
    assert first.shape == later.shape == (400, 440, 3)
    eyes = layout.points[:4].mean(axis=0).astype(int)  # (x, y)
    head = (slice(eyes[1] - 40, eyes[1] + 10), slice(eyes[0] - 60, eyes[0] + 60))  # above the mouth mask
    assert np.abs(first[head].astype(int) - later[head].astype(int)).mean() > 0.5  # the head moved between frames
    assert np.array_equal(first[-40:], later[-40:])  # the body at the bottom of the picture did not
