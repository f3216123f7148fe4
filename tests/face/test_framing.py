"""pipeline.image_fit=face: the face found wherever it is, framed as in training; honest lines when it cannot be."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("dlib", reason="face framing needs avatargen[eval]")

from avatargen.families.tiny.notes import warn_if_out_of_domain  # noqa: E402
from avatargen.io.image import load_reference_image  # noqa: E402
from tests.eval import clips  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
AVATAR = REPO / "examples" / "avatar_1.png"


def _lines() -> tuple[list[str], Callable[[str], None]]:
    lines: list[str] = []
    return lines, lines.append


def test_an_avatar_off_centre_in_a_landscape_frame_is_framed_back_as_trained(tmp_path: Path) -> None:
    avatar = np.asarray(Image.open(AVATAR).convert("RGB"))
    bigger = np.asarray(Image.fromarray(avatar).resize((384, 384), Image.Resampling.LANCZOS))
    canvas = np.empty((500, 900, 3), np.uint8)
    canvas[:] = bigger[0, 0]
    canvas[60:444, 450:834] = bigger  # right half of a landscape picture, 1.5x larger
    path = clips.write_png(tmp_path / "landscape.png", canvas)
    lines, warn = _lines()
    framed = load_reference_image(path, 256, "face", warn).astype(float)
    centre_crop = load_reference_image(path, 256, "crop").astype(float)
    original = avatar.astype(float)
    assert np.abs(framed - original).mean() < 8.0  # the avatar's own framing, back from the landscape picture
    assert np.abs(centre_crop - original).mean() > 3 * np.abs(framed - original).mean()
    assert lines == []


def test_an_image_framed_like_training_is_kept_exactly() -> None:
    assert np.array_equal(load_reference_image(AVATAR, 256, "face"), load_reference_image(AVATAR, 256, "crop"))


def test_no_face_falls_back_to_the_centre_crop_with_one_warning(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    wall = clips.write_png(tmp_path / "wall.png", rng.integers(90, 110, (240, 320, 3), dtype=np.uint8))
    lines, warn = _lines()
    framed = load_reference_image(wall, 64, "face", warn)
    assert np.array_equal(framed, load_reference_image(wall, 64, "crop"))
    assert len(lines) == 1 and lines[0].startswith("warning: no face found") and "wall.png" in lines[0]


def test_a_photograph_gets_one_line_saying_what_the_bundled_model_will_make_of_it(tmp_path: Path) -> None:
    lines, warn = _lines()
    photo = clips.write_png(tmp_path / "astronaut.png", clips.astronaut())
    warn_if_out_of_domain(load_reference_image(photo, 256, "face", warn), "image 'astronaut.png'", warn)
    assert len(lines) == 1 and "looks like a photograph" in lines[0] and "docs/model-card.md" in lines[0]
    lines.clear()
    warn_if_out_of_domain(load_reference_image(AVATAR, 256, "face", warn), "image 'avatar_1.png'", warn)
    assert lines == []  # a cartoon avatar is what the model knows


def test_without_the_detector_face_framing_is_the_centre_crop_with_one_line_on_how_to_install(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = ("import sys; sys.modules['dlib'] = None\n"
            "import numpy as np\n"
            "from avatargen.io.image import load_reference_image\n"
            f"face = load_reference_image({str(AVATAR)!r}, 64, 'face')\n"
            f"assert np.array_equal(face, load_reference_image({str(AVATAR)!r}, 64, 'crop'))\n")  # fmt: skip
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin",
                                 "XDG_CACHE_HOME": str(tmp_path)},  # a machine that never had them: nothing kept
                            timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'avatargen[eval]'" in lines[0] and "centre-cropped" in lines[0]


def test_a_dlib_that_fails_to_import_frames_by_the_centre_crop_instead_of_failing_the_render(tmp_path, monkeypatch) -> None:
    import sys

    # A dlib first on the path that raises ImportError, as a build for another Python or glibc does: installed by
    # name (its spec is found), unusable. It used to end every default render with "unexpected ImportError".
    (tmp_path / "dlib.py").write_text('raise ImportError("this dlib build does not load")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "dlib", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # nothing this dlib found was kept
    lines, warn = _lines()
    face = load_reference_image(AVATAR, 64, "face", warn)
    assert np.array_equal(face, load_reference_image(AVATAR, 64, "crop"))
    assert len(lines) == 1 and "pip install 'avatargen[eval]'" in lines[0] and "centre-cropped" in lines[0]


def test_the_photo_check_of_a_square_framed_already_reuses_the_face_found_in_it(tmp_path: Path) -> None:
    from avatargen.face.detector import shared_detector
    from avatargen.face.domain import square_is_photo
    from avatargen.io.image import load_reference

    cartoon = load_reference(AVATAR, 256, "face")  # kept whole: the square is the picture
    found = shared_detector().find(cartoon.square)
    assert cartoon.square_face is not None and cartoon.square_face.box == found.box
    assert np.array_equal(cartoon.square_face.points, found.points)
    assert square_is_photo(cartoon.square, cartoon.square_face) is square_is_photo(cartoon.square) is False
    photo = load_reference(clips.write_png(tmp_path / "astronaut.png", clips.astronaut()), 256, "face", print)
    assert photo.face is not None and photo.square_face is None  # cut and scaled: its face is searched in the square
    assert square_is_photo(photo.square, photo.square_face) is True


def test_a_large_photo_frames_its_face_as_the_same_photo_at_a_small_size_does() -> None:
    """A phone-sized picture is searched at 1280 px (the HOG search costs in proportion to the pixels); the face and
    its landmarks come out where they are in the small picture, scaled."""
    from avatargen.face.detector import shared_detector

    small = clips.astronaut()  # (512, 512, 3)
    large = np.asarray(Image.fromarray(small).resize((2048, 2048), Image.Resampling.BICUBIC))
    detector = shared_detector()
    face_small, face_large = detector.find(small), detector.find(large)
    assert face_small is not None and face_large is not None
    np.testing.assert_allclose(np.array(face_large.box) / 4, face_small.box, atol=3)
    np.testing.assert_allclose(face_large.points / 4, face_small.points, atol=2)
