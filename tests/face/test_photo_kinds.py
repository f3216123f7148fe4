"""Dark, low-contrast and grey photographs are photographs (they were taken for cartoons: few colours), the bundled
cartoons and the training avatars are not, JPEG-compressed or not; a face cut by the picture's edge is refused in
one line (exit 2) before anything is rendered."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from avatargen.data.identity import identity_from_seed
from avatargen.data.pose import FacePose
from avatargen.data.render import FaceRenderer
from avatargen.errors import BadInputError
from avatargen.face.detector import shared_detector
from avatargen.face.domain import looks_like_photo
from avatargen.io.image import load_reference, save_png
from tests.face.photos import ASTRONAUT_FACE
from tests.eval.clips import astronaut, grace_hopper

REPO = __import__("pathlib").Path(__file__).resolve().parents[2]


def _jpeg(rgb: np.ndarray, quality: int = 60) -> np.ndarray:
    data = io.BytesIO()
    Image.fromarray(rgb).save(data, "JPEG", quality=quality)
    return np.asarray(Image.open(data).convert("RGB"))


def _photo(rgb: np.ndarray) -> bool:
    detector = shared_detector()
    return looks_like_photo(detector.chip(rgb, detector.find(rgb)))


PHOTOS = {
    "dark": lambda: (255.0 * (astronaut() / 255.0) ** 1.8 * 0.45).astype(np.uint8),
    "grey": lambda: np.repeat(np.asarray(Image.fromarray(grace_hopper()).convert("L"))[..., None], 3, axis=2),
    "low contrast": lambda: (96 + 0.3 * (grace_hopper().astype(np.float64) - 96)).astype(np.uint8),
    "colour": astronaut,
}


@pytest.mark.parametrize("kind", list(PHOTOS))
def test_dark_grey_and_hazy_photos_are_photos(kind):
    rgb = PHOTOS[kind]()
    assert _photo(rgb) and _photo(_jpeg(rgb))


@pytest.mark.parametrize("name", ["avatar_1", "avatar_2", "avatar_3", "synthetic"])
def test_cartoons_are_not_photos(name):
    if name == "synthetic":
        frame, _ = FaceRenderer(identity_from_seed(4), size=256).render(FacePose())
        rgb = np.ascontiguousarray(frame)
    else:
        rgb = np.asarray(Image.open(REPO / "examples" / f"{name}.png").convert("RGB"))
    assert not _photo(rgb) and not _photo(_jpeg(rgb))


def test_a_face_cut_by_the_edge_is_refused_in_one_line(tmp_path):
    cut = np.ascontiguousarray(astronaut()[:, ASTRONAUT_FACE[0] - 10 :])  # her face's left half is off the picture
    save_png(tmp_path / "cut.png", cut)
    with pytest.raises(BadInputError, match="cut by the picture's left edge") as refused:
        load_reference(tmp_path / "cut.png", 256, "face", lambda line: None)
    assert "\n" not in str(refused.value)
    save_png(tmp_path / "whole.png", np.ascontiguousarray(astronaut()[:, ASTRONAUT_FACE[0] - 60 :]))  # just in
    assert load_reference(tmp_path / "whole.png", 256, "face", lambda line: None).face is not None
