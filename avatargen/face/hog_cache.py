"""dlib's frontal-face HOG detector, built once per machine instead of once per process.

``dlib.get_frontal_face_detector()`` builds the detector by parsing a text serialisation compiled into dlib: about
0.3 s of a render's time to first frame on the 2-core CPU, paid by every process. The same detector saved in dlib's
binary format loads in about a millisecond, so the first build is saved in the user's cache folder
(``$XDG_CACHE_HOME/avatargen``, else ``~/.cache/avatargen``), one file per dlib version, and later processes load it.

The file's name carries the SHA-256 of its contents: a file that was cut short or altered on disk does not match its
name and is rebuilt, never used. It is written to a temporary name and renamed into place, so a process that reads
it while another writes it sees either no file or a whole one. An unwritable cache folder only costs the 0.3 s.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

_DIGEST_CHARS = 16  # of the SHA-256 in hex, in the file name


def cache_folder() -> Path:
    """Where avatargen keeps what it derives once per machine: ``$XDG_CACHE_HOME/avatargen`` or ``~/.cache/avatargen``."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "avatargen"


def prune_least_recently_used(folder: Path, pattern: str, keep: int) -> None:
    """Remove the files of ``folder`` matching ``pattern`` past the ``keep`` most recently used (by modification
    time: a cache marks an entry used when it reads it). Files removed meanwhile by another process are skipped."""
    entries = []
    for path in folder.glob(pattern):
        with contextlib.suppress(OSError):
            entries.append((path.stat().st_mtime_ns, path))
    for _, path in sorted(entries)[: max(0, len(entries) - keep)]:
        with contextlib.suppress(OSError):
            path.unlink()


def frontal_face_detector(dlib: Any) -> Any:
    """dlib's frontal-face detector (``dlib.fhog_object_detector``): loaded from the cache folder when a whole copy
    for this dlib version is there, else built by dlib and saved there for the next process."""
    folder = cache_folder()
    prefix = f"frontal_face_detector-dlib{dlib.__version__}-"
    for path in sorted(folder.glob(f"{prefix}*.svm")):
        if _digest(path) == path.stem.removeprefix(prefix):
            try:
                return dlib.fhog_object_detector(str(path))
            except RuntimeError:  # dlib cannot read it (another build's format): rebuilt below
                pass
        with contextlib.suppress(OSError):
            path.unlink()  # cut short, altered or unreadable: never used again
    detector = dlib.get_frontal_face_detector()
    _save(detector, folder, prefix)
    return detector


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:_DIGEST_CHARS]
    except OSError:
        return None


def _save(detector: Any, folder: Path, prefix: str) -> None:
    """Save ``detector`` as ``folder/<prefix><digest>.svm``, atomically; a folder that cannot be written is skipped."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=".detector-", suffix=".svm")
        os.close(handle)
        try:
            detector.save(temporary)
            target = folder / f"{prefix}{_digest(Path(temporary))}.svm"
            os.replace(temporary, target)
        finally:
            if os.path.exists(temporary):
                os.unlink(temporary)
    except (OSError, RuntimeError):  # a read-only home, a full disk: the next process builds it again
        pass
