"""What the face networks found in a picture, kept per machine: rendering a picture again (bulk renders of one
avatar, a render run again with other audio) skips them.

Framing a reference runs dlib's face search with its 5-point landmarks and MediaPipe's face mesh (which face, which
way up, where the lips are): 0.3-0.45 s of a render's time to first frame on a 2-core CPU, most of it loading their
networks (the shape predictor ~0.1 s, the face mesh's graph 0.1-0.17 s). What they find depends only on the
picture's pixels, the networks and the search's settings, so it is kept in the cache folder
(``avatargen.face.hog_cache.cache_folder``), one JSON file per picture named by the SHA-256 of its pixels:
``KnownPicture(rgb).faces(search)``, ``.mesh(face, search)`` and ``.photo(face, judge)`` (whether the face looks
like a photograph: its chip needs dlib, ~30 ms to import) return what was kept, else run the search and keep its
result.

A render from the cache is the same render bit for bit: the numbers are stored as JSON floats, which read back to
the same float64. An entry records the code of the searches (a digest of the modules that hold them) and the
networks' files (size and modification time of each) it was made with, and the SHA-256 of its contents: an entry
made with others, cut short or altered is not used (the picture is searched again and the entry rewritten). Files
are written to a temporary name and renamed into place; an unwritable cache folder only costs the search. At most
``MAX_PICTURES`` pictures are kept: writing a new one removes the least recently used.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from avatargen.face.detector import Face
from avatargen.face.hog_cache import cache_folder, prune_least_recently_used

FORMAT = 2  # 2: the photo verdicts of the flat-pixel test (domain.py); entries of another format are searched again
MAX_PICTURES = 1000  # a few kB each (a face mesh is 478 points)
Points = np.ndarray  # (N, 2) float64, (x, y) pixels


def pictures_folder() -> Path:
    """Where the pictures' entries are kept: ``faces`` in the cache folder."""
    return cache_folder() / "faces"


class KnownPicture:
    """The cache entry of one (H, W, 3) uint8 picture: its faces, face meshes and photo verdicts, found once per
    machine."""

    def __init__(self, rgb: np.ndarray) -> None:
        pixels = np.ascontiguousarray(rgb)
        digest = hashlib.sha256(repr(pixels.shape).encode())
        digest.update(pixels.data)
        self.path = pictures_folder() / f"{digest.hexdigest()}.json"
        self.made_with = _made_with()
        self.entry: dict[str, Any] = _read(self.path, self.made_with)

    @property
    def searched(self) -> bool:
        """Whether the picture's faces were searched before, with the networks installed now."""
        return "faces" in self.entry

    def faces(self, search: Callable[[], list[Face]]) -> list[Face]:
        """The picture's faces as ``search`` (``FaceDetector.find_all`` of this picture) finds them."""
        if "faces" not in self.entry:
            self.entry["faces"] = [_face_entry(face) for face in search()]
            self._write()
        return [Face(tuple(kept["box"]), np.array(kept["points"], dtype=np.float64), kept["score"])
                for kept in self.entry["faces"]]  # fmt: skip

    def mesh(self, face: Face, search: Callable[[], Points | None]) -> Points | None:
        """The face mesh of ``face`` in the picture as ``search`` (``LipFinder.mesh``) finds it (None: no mesh)."""
        meshes = self.entry.setdefault("meshes", {})
        key = json.dumps(_face_entry(face))
        if key not in meshes:
            found = search()
            meshes[key] = None if found is None else found.tolist()
            self._write()
        kept = meshes[key]
        return None if kept is None else np.array(kept, dtype=np.float64)

    def photo(self, face: Face, judge: Callable[[], bool]) -> bool:
        """Whether ``face`` in the picture looks like a photograph, as ``judge`` (``looks_like_photo`` of its chip)
        says: kept, so a render of a picture seen before does not import dlib for its chip."""
        verdicts = self.entry.setdefault("photo", {})
        key = json.dumps(_face_entry(face))
        if key not in verdicts:
            verdicts[key] = bool(judge())
            self._write()
        return verdicts[key]

    def _write(self) -> None:
        """Save the entry (atomically); a new picture's first write also drops the least recently used pictures
        past ``MAX_PICTURES``. A folder that cannot be written is skipped."""
        body = {"format": FORMAT, "made_with": self.made_with, **self.entry}
        text = json.dumps(body, sort_keys=True)
        document = json.dumps({"sha256": hashlib.sha256(text.encode()).hexdigest(), "entry": body}, sort_keys=True)
        folder = self.path.parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
            new = not self.path.exists()
            handle, temporary = tempfile.mkstemp(dir=folder, prefix=".picture-", suffix=".json")
            try:
                with os.fdopen(handle, "w", encoding="utf-8") as out:
                    out.write(document)
                os.replace(temporary, self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
                raise
            if new:  # an entry rewritten (its mesh added, a stale one replaced) adds no picture
                _prune(folder)
        except OSError:
            pass


def _face_entry(face: Face) -> dict[str, Any]:
    return {"box": [int(v) for v in face.box], "points": face.points.tolist(), "score": float(face.score)}


def _read(path: Path, made_with: dict[str, Any]) -> dict[str, Any]:
    """The faces and meshes kept in ``path`` when it is whole and was made as this process would make it; else {}.
    A picture found is marked as used (its modification time), for ``_prune``."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        body = document["entry"]
        text = json.dumps(body, sort_keys=True)
        whole = hashlib.sha256(text.encode()).hexdigest() == document["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    if not whole or body.get("format") != FORMAT or body.get("made_with") != made_with:
        return {}
    with contextlib.suppress(OSError):
        os.utime(path)
    return {key: body[key] for key in ("faces", "meshes", "photo") if key in body}


def _prune(folder: Path) -> None:
    """Remove the least recently used entries past ``MAX_PICTURES``."""
    prune_least_recently_used(folder, "*.json", MAX_PICTURES)


@functools.cache
def _made_with() -> dict[str, Any]:
    """The code of the searches and of the photo check (the SHA-256 of the modules that hold them and their
    settings) and the networks' files (name, size, modification time): another avatargen, dlib, MediaPipe or face
    model makes new entries. Once per process (~3 ms)."""
    code = hashlib.sha256()
    for searches in ("detector.py", "domain.py", "lips.py"):  # read beside this file, not imported: domain imports us
        code.update(Path(__file__).with_name(searches).read_bytes())
    files = {}
    for name, path in _network_files().items():
        try:
            stat = path.stat()
            files[name] = [stat.st_size, stat.st_mtime_ns]
        except OSError:
            files[name] = None
    return {"code": code.hexdigest(), "files": files}


def _network_files() -> dict[str, Path]:
    """The files whose code or weights decide what is found: dlib's library, the shape predictor, MediaPipe's
    bindings and face-landmark network (found without importing them)."""
    from avatargen.face.detector import _SHAPE_MODEL, FaceExtraMissing, face_model_folder

    files: dict[str, Path] = {}
    for name in ("dlib", "_dlib_pybind11"):  # the package a render imports, and the binary it loads
        with contextlib.suppress(ValueError):  # a module set to None in sys.modules: not importable
            spec = importlib.util.find_spec(name)
            if spec is not None and spec.origin:
                files[name] = Path(spec.origin)
    with contextlib.suppress(FaceExtraMissing):
        files["shape_predictor"] = face_model_folder() / _SHAPE_MODEL
    mediapipe = importlib.util.find_spec("mediapipe")
    if mediapipe is not None and mediapipe.submodule_search_locations:
        root = Path(next(iter(mediapipe.submodule_search_locations)))
        for binding in sorted((root / "python").glob("_framework_bindings*")):
            files["mediapipe"] = binding
        files["face_landmark"] = root / "modules" / "face_landmark" / "face_landmark_with_attention.tflite"
    return files
