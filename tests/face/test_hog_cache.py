"""The HOG face detector is built by dlib once per machine and loaded from the cache folder afterwards: the same
detector, ~100x faster to get, and a damaged or unwritable cache never changes what is detected."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

dlib = pytest.importorskip("dlib", reason="face framing needs avatargen[eval]")

from avatargen.face.hog_cache import cache_folder, frontal_face_detector  # noqa: E402

AVATAR = Path(__file__).resolve().parents[2] / "examples" / "avatar_1.png"


def _saved(detector, folder: Path) -> bytes:
    path = folder / "saved.svm"
    detector.save(str(path))
    return path.read_bytes()


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return cache_folder()


def test_the_second_process_loads_the_very_detector_dlib_builds_in_a_fraction_of_the_time(cache, tmp_path):
    started = time.perf_counter()
    built = frontal_face_detector(dlib)  # not cached yet: dlib builds it, and it is saved
    build_s = time.perf_counter() - started
    assert len(list(cache.glob("frontal_face_detector-*.svm"))) == 1
    started = time.perf_counter()
    loaded = frontal_face_detector(dlib)
    load_s = time.perf_counter() - started
    assert load_s < build_s / 10  # measured: ~1 ms against ~300 ms
    reference = _saved(dlib.get_frontal_face_detector(), tmp_path)
    assert _saved(loaded, tmp_path) == reference == _saved(built, tmp_path)
    picture = np.asarray(Image.open(AVATAR).convert("RGB"))
    assert str(loaded.run(picture, 0, 0.0)) == str(dlib.get_frontal_face_detector().run(picture, 0, 0.0))


def test_a_damaged_cache_file_is_rebuilt_never_used(cache, tmp_path):
    frontal_face_detector(dlib)
    (path,) = cache.glob("frontal_face_detector-*.svm")
    damaged = bytearray(path.read_bytes())
    damaged[-2000] ^= 0x01  # one bit of one weight: dlib reads it without complaint, a different detector
    path.write_bytes(bytes(damaged))
    detector = frontal_face_detector(dlib)
    assert _saved(detector, tmp_path) == _saved(dlib.get_frontal_face_detector(), tmp_path)
    (again,) = cache.glob("frontal_face_detector-*.svm")
    assert again.read_bytes() == _saved(detector, tmp_path)  # the whole file is back


def test_an_unwritable_cache_folder_only_costs_the_build(tmp_path, monkeypatch):
    blocked = tmp_path / "not_a_folder"
    blocked.write_text("a file where the cache folder would go")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    detector = frontal_face_detector(dlib)
    assert _saved(detector, tmp_path) == _saved(dlib.get_frontal_face_detector(), tmp_path)
