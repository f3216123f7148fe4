"""The reference picture's face search, run beside the start of ``avatargen render`` in a process of its own.

A fresh render process spends its first second or more importing torch and the models' code on one core, and only
then searches the picture for its face (dlib's detector and landmarks, MediaPipe's face mesh, the photo verdict:
0.13-0.17 s of a new picture's first frame on a 2-core CPU). ``start`` runs that search meanwhile on the other core
in ``python -m avatargen.io.image_prefetch``, which imports neither torch nor the models; what it finds goes to the
picture cache (avatargen/face/picture_cache.py), where the render reads it as for a picture rendered before: the
same faces, the same frames.

The search has two steps. At once, the faces and face meshes of the whole picture (what ``pipeline.image_fit=face``
reads whatever the model). Then, when the render's config says the model's square size and which face it animates
(``frame``, as soon as the CLI has the config), the framed square's photo verdict and the chosen face's lips; where the
render frames the picture (``finish``) it waits for the search to end, then frames it itself from the cache. A render
that does not frame by the face ``stop``s it. A search that fails leaves the cache as it was: the render then searches
as it would without it, and reports the picture's problem itself.

It is started only where it can gain: a fresh process (torch not imported yet), one process (not under torchrun),
an image file not searched so before (a marker per file, by path, size, modification time and inode, in
``faces/files`` of the cache folder: a search beside the start costs the render's own import ~0.03 s on a 2-core
CPU, where it has nothing left to find), and the face networks installed (the ``eval`` extra). It dies with the
render (``PR_SET_PDEATHSIG``). A marker that outlives its entry (the face networks upgraded) only means the render
searches itself.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import importlib.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from avatargen.face.hog_cache import cache_folder, prune_least_recently_used

WAIT_S = 15.0  # the longest a render waits for the search (a 4000x4000 photograph's takes ~2 s) before its own
_FIRST_SIZE = 256  # the square size of the first step's framing: only its faces and meshes are kept, not the square
MAX_MARKERS = 1000  # files searched so before (the picture cache keeps as many pictures)

_running: dict[str, subprocess.Popen] = {}  # the picture's absolute path -> its search


def _key(image: Path) -> str:
    return os.path.abspath(image)


def should_start(image: Path | None) -> bool:
    """Whether a search beside the start pays for ``image`` (see the module docstring)."""
    return (
        image is not None
        and "torch" not in sys.modules
        and int(os.environ.get("WORLD_SIZE", "1") or 1) == 1
        and os.path.isfile(image)
        and not searched_before(image)
        and importlib.util.find_spec("dlib") is not None
    )


def _marker(image: Path) -> Path | None:
    """The marker of the file ``image`` as it is now (None: it cannot be read)."""
    try:
        stat = os.stat(image)
    except OSError:
        return None
    key = f"{_key(image)}\0{stat.st_size}\0{stat.st_mtime_ns}\0{stat.st_ino}"
    return cache_folder() / "faces" / "files" / hashlib.sha256(key.encode()).hexdigest()


def searched_before(image: Path) -> bool:
    """Whether a search beside a render's start searched the file ``image``, as it is now, before."""
    marker = _marker(image)
    return marker is not None and marker.is_file()


def _mark_searched(image: Path) -> None:
    marker = _marker(image)
    if marker is None:
        return
    with contextlib.suppress(OSError):  # a folder that cannot be written: the next render searches beside again
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
        prune_least_recently_used(marker.parent, "*", MAX_MARKERS)


def start(image: Path | None) -> None:
    """Start the face search of ``image`` where it pays (``should_start``); nothing otherwise."""
    if not should_start(image) or _key(image) in _running:
        return
    # -P: the working folder is not searched for modules (a folder named avatargen there is not this package)
    command = [sys.executable, "-P", "-m", "avatargen.io.image_prefetch", _key(image), str(os.getpid())]
    try:
        _running[_key(image)] = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                                 stderr=subprocess.DEVNULL, text=True)  # fmt: skip
    except OSError:  # no process to be had: the render searches itself
        pass


def frame(image: Path, size: int, face: int | None) -> None:
    """Give the search of ``image`` its second step: the square ``size`` and the ``face`` (1-based; None: the
    largest) the render frames, as soon as its config says them. Nothing where none runs for ``image``."""
    process = _running.get(_key(image))
    if process is not None and not process.stdin.closed:
        with contextlib.suppress(OSError):  # it ended already: the render searches itself
            process.stdin.write(f"{size} {face or 0}\n")
        with contextlib.suppress(OSError):
            process.stdin.close()


def finish(image: Path, size: int, face: int | None, warn: Callable[[str], None] | None = None,
           timeout_s: float = WAIT_S) -> None:  # fmt: skip
    """``frame`` (where not done yet), then wait for the search of ``image`` to end: what it found is then in the
    picture cache. A search that is stopped (SIGSTOP, a debugger) or runs past ``timeout_s`` is ended at once with a
    note to ``warn``: the render searches the picture itself. Nothing where none runs for ``image``."""
    frame(image, size, face)
    process = _running.pop(_key(image), None)
    if process is None:
        return
    deadline, pause = time.monotonic() + timeout_s, 0.002
    while process.poll() is None:
        why = "is stopped" if _is_stopped(process.pid) else None
        if why is None and time.monotonic() > deadline:
            why = f"took over {timeout_s:g} s"
        if why is not None:
            if warn is not None:
                warn(f"note: the face search beside the start (pid {process.pid}) {why}; ended it, the render "
                     "searches the picture itself")  # fmt: skip
            break
        time.sleep(pause)
        pause = min(2 * pause, 0.05)
    _end(process)


def _is_stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (state T or t in /proc): it would never end by itself."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2 :][:1] in ("T", "t")


def stop(image: Path | None = None) -> None:
    """End the search of ``image`` (None: every search this process started) without its second step."""
    keys = list(_running) if image is None else [_key(image)]
    for key in keys:
        process = _running.pop(key, None)
        if process is not None:
            _end(process)


@contextlib.contextmanager
def beside(image: Path | None) -> Iterator[None]:
    """The search of ``image`` started for the block, ended when it leaves (see ``start``)."""
    start(image)
    try:
        yield
    finally:
        stop()


def _end(process: subprocess.Popen) -> None:
    with contextlib.suppress(OSError):
        process.stdin.close()
    if process.poll() is None:
        process.kill()
    process.wait()


def _die_with_parent(parent: int) -> bool:
    """Ask the kernel for SIGKILL when the render's process ends; False when it has ended already."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG (Linux)
    return os.getppid() == parent


def main(argv: list[str]) -> int:
    """``python -m avatargen.io.image_prefetch IMAGE PARENT_PID``: the two steps (module docstring), the second on the
    line ``SIZE FACE`` (FACE 0: the largest) read from standard input; an empty input ends it after the first."""
    if len(argv) != 2 or not _die_with_parent(int(argv[1])):
        return 2
    from avatargen.face.choice import reference_lips
    from avatargen.face.domain import square_is_photo
    from avatargen.io.image import read_picture, reference_from_rgb

    def quiet(line: str) -> None:
        pass

    try:
        rgb = read_picture(argv[0], "face")
        first = reference_from_rgb(rgb, _FIRST_SIZE, "face", quiet)
        _mark_searched(Path(argv[0]))
        words = sys.stdin.readline().split()
        if len(words) != 2:
            return 0
        size, face = int(words[0]), int(words[1]) or None
        # the first step's framing where the render frames the same square (the bundled model's, the largest face)
        same_square = (size, face) == (_FIRST_SIZE, None)
        reference = first if same_square else reference_from_rgb(rgb, size, "face", quiet, face=face)
        square_is_photo(reference.square, reference.square_face)
        reference_lips(reference.picture, reference.face)
    except Exception:  # noqa: BLE001 - the render meets the same problem and reports it itself
        return 1
    return 0


if __name__ == "__main__":
    # Out at once: the render waits for this process to end, and the cache files are closed already, while an
    # interpreter's own exit takes longer with MediaPipe's graph and dlib's networks to tear down.
    os._exit(main(sys.argv[1:]))
