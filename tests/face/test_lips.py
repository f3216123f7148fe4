"""Finding the lips (MediaPipe's face mesh), trusting them only where they show, and choosing the face to animate."""

from __future__ import annotations

import numpy as np
import pytest

from avatargen.errors import BadInputError
from avatargen.face.choice import choose_face, reference_lips
from avatargen.face.detector import shared_detector
from avatargen.face.choice import shared_lip_finder
from avatargen.face.lips import EYES, OTHER_FACE, lips_in_mesh, lips_installed
from tests.conftest import FAST, REPO, run_cli, write_speechlike_wav
from tests.face import photos


def _lines() -> tuple[list[str], object]:
    lines: list[str] = []
    return lines, lines.append


# MediaPipe's face mesh finds the lips; it has no wheel for Python 3.13, where the render places the mouth from the
# detector's five landmarks and says so (tests/compose/test_render_composite.py holds that line).
needs_mesh = pytest.mark.skipif(not lips_installed(), reason="MediaPipe's face mesh is not installed (none for this Python)")


@needs_mesh
def test_the_lip_contours_sit_on_the_astronauts_lips_around_her_teeth():
    picture = photos.astronaut()
    search = reference_lips(picture, shared_detector().find(picture))
    lips = search.lips
    assert search.problem is None and lips is not None
    # Her mouth corners, read off the photo by eye: (202, 140) and (245, 141).
    left, right = lips.corners
    assert np.abs(left - (202, 140)).max() < 4 and np.abs(right - (245, 141)).max() < 4
    # Between the inner contours: her teeth, pale; between the inner and outer ones: her lips, redder than teeth.
    inner_middle = np.rint((lips.inner[5] + lips.inner[15]) / 2).astype(int)  # lower and upper inner lip, middle
    teeth = picture[inner_middle[1], inner_middle[0]].astype(int)
    lower_lip = np.rint((lips.inner[5] + lips.outer[5]) / 2).astype(int)
    lip = picture[lower_lip[1], lower_lip[0]].astype(int)
    assert teeth.min() > 150 and lip[0] - lip[2] > teeth[0] - teeth[2] + 20, (teeth, lip)


@needs_mesh
@pytest.mark.parametrize("name", ["tilted", "half_body", "grace_hopper", "smiling_render", "web_palette"])
def test_lips_are_found_on_every_test_photo(name):
    picture = photos.TEST_PHOTOS[name]()
    search = reference_lips(picture, shared_detector().find(picture))
    assert search.lips is not None, search.problem
    eyes = shared_detector().find(picture).points[[0, 2]]  # outer eye corners
    assert 0.5 < search.lips.width / np.linalg.norm(eyes[0] - eyes[1]) < 1.0  # a mouth's width, not a nose's


@needs_mesh
@pytest.mark.parametrize("make", [photos.hand_over_mouth, photos.masked], ids=["hand", "mask"])
def test_a_covered_mouth_gives_no_lips_and_says_why(make):
    picture = make()
    search = reference_lips(picture, shared_detector().find(picture))
    assert search.lips is None and search.problem


def _with_alpha(path, rgb: np.ndarray, alpha: np.ndarray) -> str:
    from PIL import Image

    Image.fromarray(np.dstack([rgb, alpha.astype(np.uint8)]), "RGBA").save(path)
    return str(path)


@needs_mesh
@pytest.mark.parametrize("turned", [False, True], ids=["upright", "on its side"])
def test_a_half_transparent_portrait_keeps_its_lips_and_a_transparent_mouth_does_not(tmp_path, turned):
    # Read over white, a face at 50 % opacity shows its lips at half their contrast: it was refused as covered.
    from avatargen.io.image import load_reference

    picture = photos.astronaut()
    height, width = picture.shape[:2]
    opaque = reference_lips(picture, shared_detector().find(picture)).lips

    def loaded(name: str, alpha: np.ndarray):  # the picture and its alpha saved on their side, when turned
        rgba = [np.ascontiguousarray(np.rot90(a, -1)) if turned else a for a in (picture, alpha)]
        return load_reference(_with_alpha(tmp_path / name, *rgba), 256, "face")

    half = loaded("half.png", np.full((height, width), 128))
    search = reference_lips(half.picture, half.face, half.alpha)
    assert search.problem is None and np.abs(search.lips.outer - opaque.outer).max() < 4, search.problem
    soft = np.clip(np.mgrid[:height, :width][1] / width * 2 * 255, 0, 255)  # from clear on the left to opaque mid-way
    edged = loaded("soft.png", soft)
    assert reference_lips(edged.picture, edged.face, edged.alpha).problem is None
    mouth = np.full((height, width), 255)
    x0, y0, x1, y1 = (int(v) for v in (*opaque.outer.min(axis=0) - 8, *opaque.outer.max(axis=0) + 8))
    mouth[y0:y1, x0:x1] = 30  # all but see-through over the mouth
    hidden = loaded("mouth.png", mouth)
    assert reference_lips(hidden.picture, hidden.face, hidden.alpha).problem == (
        "the lips do not show (transparent: 12% opaque in the picture)")  # fmt: skip


@needs_mesh
def test_a_half_transparent_photograph_renders(tmp_path):
    picture = photos.astronaut()
    path = _with_alpha(tmp_path / "half.png", picture, np.full(picture.shape[:2], 128))
    audio = write_speechlike_wav(tmp_path / "speech.wav", 1.0)
    result = run_cli("render", "-i", path, "-a", str(audio), "-o", str(tmp_path / "out.mp4"), "-q", *FAST)
    assert result.returncode == 0 and (tmp_path / "out.mp4").is_file(), result.stderr


@needs_mesh
def test_a_stylised_face_whose_large_eyes_the_mesh_reads_apart_keeps_its_lips_and_another_face_does_not():
    """A stylised 3-D cartoon's eyes are larger than any face the detector or the mesh learnt: the two put the eye
    corners apart, yet both find its nose; it is the same face and its lips are the mesh's. A mesh whose nose is
    elsewhere too fits another face."""
    picture = photos.astronaut()
    face = shared_detector().find(picture)
    points = shared_lip_finder().mesh(picture, face)
    span = float(np.linalg.norm(face.points[0] - face.points[2]))
    stylised = points.copy()
    for corners, side in zip(EYES, (-1.0, 1.0)):  # each eye's corners 0.4 spans further out, as drawn eyes are
        stylised[list(corners)] += (side * 0.4 * span, -0.1 * span)
    assert lips_in_mesh(picture, face, stylised).lips is not None
    elsewhere = points + (1.2 * span, 0.0)  # the whole mesh on a face beside this one
    assert lips_in_mesh(picture, face, elsewhere) == (None, OTHER_FACE)


def test_with_two_people_the_largest_face_is_animated_and_said_once():
    picture = photos.two_people()
    lines, warn = _lines()
    chosen = choose_face(picture, shared_detector(), warn, "image 'two.png'")
    assert chosen.face.box[0] > 512  # Grace Hopper, on the right, is the larger face
    assert len(lines) == 1 and "2 faces" in lines[0] and "face 2" in lines[0] and "--face N" in lines[0]
    lines.clear()
    chosen = choose_face(picture, shared_detector(), warn, "image 'two.png'", number=1)
    assert chosen.face.box[2] < 512 and len(lines) == 1 and "as asked" in lines[0]  # the astronaut
    with pytest.raises(BadInputError, match=r"--face 3: image 'two.png' has 2 faces .* give --face 1-2"):
        choose_face(picture, shared_detector(), warn, "image 'two.png'", number=3)


def test_without_the_face_mesh_a_weak_detection_beside_two_faces_is_not_counted(monkeypatch):
    """Where MediaPipe cannot install (Python 3.13), the HOG detector's weak third match in this picture (margin 0.22,
    below the astronaut's face) has no face mesh to rule it out: the two clear faces are still the count."""
    monkeypatch.setattr("avatargen.face.choice.lips_installed", lambda: False)
    picture = photos.two_people()
    assert len(shared_detector().find_all(picture)) == 3  # what the detector alone finds
    lines, warn = _lines()
    chosen = choose_face(picture, shared_detector(), warn, "image 'two.png'")
    assert chosen.face.box[0] > 512 and len(lines) == 1 and "2 faces" in lines[0] and "face 2" in lines[0]


def test_a_picture_on_its_side_is_turned_upright_with_one_line():
    lines, warn = _lines()
    chosen = choose_face(photos.on_its_side(), shared_detector(), warn, "image 'side.png'")
    assert np.array_equal(chosen.picture, photos.astronaut())
    assert chosen.face is not None and abs(chosen.face.centre[0] - 222) < 10
    assert len(lines) == 1 and "quarter turn" in lines[0] and "upright" in lines[0]


def test_face_number_past_the_faces_is_refused_in_one_line(tmp_path):
    from avatargen.io.image import save_png

    save_png(tmp_path / "astronaut.png", photos.astronaut())
    result = run_cli("render", "-i", str(tmp_path / "astronaut.png"), "-a", str(REPO / "examples" / "speech_1.flac"),
                     "-o", str(tmp_path / "out.mp4"), "--face", "2")  # fmt: skip
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--face 2" in lines[0] and "has 1 face" in lines[0], lines
    assert not (tmp_path / "out.mp4").exists()


@needs_mesh
def test_the_face_mesh_loads_without_the_rest_of_mediapipe_which_still_imports_whole():
    """A render imports only the face mesh (not pyplot, sounddevice, OpenCV: 0.6 s of its start); a later
    ``import mediapipe`` in the same process still gets the whole package."""
    import subprocess
    import sys

    code = ("import sys\nfrom avatargen.face.lips import LipFinder\nLipFinder()\n"
            "assert not {'matplotlib.pyplot', 'sounddevice', 'cv2'} & set(sys.modules), sys.modules.keys()\n"
            "import mediapipe\nassert mediapipe.solutions.hands.Hands and mediapipe.tasks\nprint(mediapipe.__version__)")  # fmt: skip
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "0.10.21", result.stderr[-2000:]


def test_face_number_without_any_face_is_refused():
    blank = np.full((200, 200, 3), 128, np.uint8)
    with pytest.raises(BadInputError, match=r"--face 1: no face found in image 'blank.png'"):
        choose_face(blank, shared_detector(), lambda line: None, "image 'blank.png'", number=1)
