"""A picture framed before is framed again from the cache folder, without loading the face networks, exactly as they
frame it; a damaged, outdated or unwritable cache never changes what is found."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("dlib", reason="face framing needs avatargen[eval]")
pytest.importorskip("mediapipe", reason="the lip finder needs avatargen[eval]")

from avatargen.face import choice, detector, picture_cache  # noqa: E402
from avatargen.face.choice import reference_lips  # noqa: E402
from avatargen.face.detector import Face, FaceDetector  # noqa: E402
from avatargen.face.domain import square_is_photo  # noqa: E402
from avatargen.face.picture_cache import KnownPicture, pictures_folder  # noqa: E402
from avatargen.io.image import load_reference  # noqa: E402
from tests.eval import clips  # noqa: E402

AVATAR = Path(__file__).resolve().parents[2] / "examples" / "avatar_1.png"


def _fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """As in a new process: no detector or lip finder built yet."""
    monkeypatch.setattr(detector, "_SHARED", None)
    monkeypatch.setattr(choice, "_FINDER", None)


def _without_networks(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the face networks were loaded, or dlib asked for a face chip")

    monkeypatch.setattr(FaceDetector, "_networks", refuse)
    monkeypatch.setattr(FaceDetector, "chip", refuse)  # the photo check's: the only use of dlib a render has left
    monkeypatch.setattr(choice, "LipFinder", refuse)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    _fresh_process(monkeypatch)
    return pictures_folder()


def _framed(path: Path) -> dict:
    """Everything a render takes from the face networks: the framing, the lips, the photo check, the lines said."""
    lines: list[str] = []
    reference = load_reference(path, 256, "face", lines.append)
    lips = reference_lips(reference.picture, reference.face)
    face = reference.face
    return {
        "square": reference.square, "picture": reference.picture, "crop": reference.crop, "lines": lines,
        "face": None if face is None else (face.box, face.points, face.score),
        "lips": None if lips is None else (lips.problem, None if lips.lips is None else (lips.lips.outer, lips.lips.inner)),
        "photo": square_is_photo(reference.square, reference.square_face),
    }  # fmt: skip


def _assert_same(found: dict, expected: dict) -> None:
    assert found.keys() == expected.keys()
    for key in found:
        np.testing.assert_equal(found[key], expected[key], err_msg=key)


@pytest.mark.parametrize("picture", ["astronaut", "avatar", "astronaut on its side"])
def test_a_picture_framed_before_is_framed_the_same_without_loading_the_face_networks(cache, tmp_path, monkeypatch, picture):
    rgb = {"astronaut": clips.astronaut(), "avatar": np.asarray(Image.open(AVATAR).convert("RGB")),
           "astronaut on its side": np.rot90(clips.astronaut(), 1)}[picture]  # fmt: skip
    path = clips.write_png(tmp_path / "picture.png", np.ascontiguousarray(rgb))
    searched = _framed(path)
    assert searched["face"] is not None and searched["lips"] is not None
    if picture == "astronaut on its side":
        assert any("turned upright" in line for line in searched["lines"])
    _fresh_process(monkeypatch)
    _without_networks(monkeypatch)
    _assert_same(_framed(path), searched)


def test_a_damaged_entry_is_searched_again_and_rewritten(cache, tmp_path, monkeypatch):
    path = clips.write_png(tmp_path / "astronaut.png", clips.astronaut())
    searched = _framed(path)
    files = sorted(cache.glob("*.json"))
    kept = {file: file.read_text() for file in files}
    document = json.loads(kept[files[0]])
    document["entry"]["faces"][0]["points"][0][0] += 7.0  # valid JSON, another face: the checksum no longer matches
    files[0].write_text(json.dumps(document))
    _fresh_process(monkeypatch)
    _assert_same(_framed(path), searched)
    assert {file: file.read_text() for file in files} == kept


@pytest.mark.parametrize("change", ["dlib", "code"])
def test_an_entry_made_with_other_networks_or_code_is_not_used(cache, tmp_path, monkeypatch, change):
    path = clips.write_png(tmp_path / "astronaut.png", clips.astronaut())
    searched = _framed(path)
    made_with = copy.deepcopy(picture_cache._made_with())
    if change == "dlib":
        made_with["files"]["dlib"] = [1, 2]  # an upgraded dlib
    else:
        made_with["code"] = "0" * 64  # another version of the searches (or of their settings)
    monkeypatch.setattr(picture_cache, "_made_with", lambda: made_with)
    _fresh_process(monkeypatch)
    searches = []
    find_all = FaceDetector.find_all
    monkeypatch.setattr(FaceDetector, "find_all", lambda self, rgb: searches.append(1) or find_all(self, rgb))
    _assert_same(_framed(path), searched)
    assert searches  # searched again, not read


def test_an_unwritable_cache_folder_only_costs_the_search(tmp_path, monkeypatch):
    path = clips.write_png(tmp_path / "astronaut.png", clips.astronaut())
    searched = _framed(path)
    blocked = tmp_path / "not_a_folder"
    blocked.write_text("a file where the cache folder would go")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    _fresh_process(monkeypatch)
    _assert_same(_framed(path), searched)


def test_past_max_pictures_the_least_recently_used_is_dropped(cache, monkeypatch):
    monkeypatch.setattr(picture_cache, "MAX_PICTURES", 2)
    pictures = [np.full((40, 40, 3), value, np.uint8) for value in (10, 20, 30)]
    for age, rgb in enumerate(pictures[:2]):
        known = KnownPicture(rgb)
        known.faces(lambda: [])
        os.utime(known.path, ns=(age * 10**9, age * 10**9))  # the first is the least recently used ...
    KnownPicture(pictures[0]).faces(lambda: pytest.fail("kept, not searched"))  # ... until it is read again
    KnownPicture(pictures[2]).faces(lambda: [])
    assert {path.name for path in cache.glob("*.json")} == {KnownPicture(rgb).path.name for rgb in (pictures[0], pictures[2])}


def test_only_a_new_picture_prunes_the_folder(cache, monkeypatch):
    pruned = []
    monkeypatch.setattr(picture_cache, "_prune", lambda folder: pruned.append(folder))
    known = KnownPicture(np.full((40, 40, 3), 10, np.uint8))
    known.faces(lambda: [])
    known.mesh(Face((0, 0, 10, 10), np.zeros((5, 2)), 1.0), lambda: None)  # the same picture's entry written again
    assert pruned == [cache]


def test_a_render_of_a_picture_framed_before_does_not_import_dlib(cache, tmp_path):
    """dlib's import alone is ~30 ms of the first frame; a picture seen before needs nothing of it."""
    path = clips.write_png(tmp_path / "astronaut.png", clips.astronaut())
    _framed(path)  # the first render: searched and kept
    probe = (
        "import sys\n"
        "from avatargen.compose.layout import FaceLayout\n"
        "from avatargen.config.loader import load_config, to_config\n"
        "from avatargen.io.image import load_reference\n"
        "from avatargen.render.compositing import compositor_for\n"
        "from avatargen.face.domain import square_is_photo\n"
        f"reference = load_reference({str(path)!r}, 256, 'face', print)\n"
        "photo = square_is_photo(reference.square, reference.square_face)\n"
        "compositor_for(reference, to_config(load_config([])))\n"
        "print('photo', photo, 'dlib' in sys.modules)\n"
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(cache.parent.parent)}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-3:] == ["photo", "True", "False"], done.stdout
