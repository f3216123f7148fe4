"""The face search beside a render's start: what it finds frames the picture exactly as the render's own search
would, without the face networks; a fresh render that uses it gives the same video as one that does not; it never
outlives the render, and a picture it cannot read is reported by the render as before."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("dlib", reason="the face search needs avatargen[eval]")
pytest.importorskip("mediapipe", reason="the lip finder needs avatargen[eval]")

from avatargen.io import image_prefetch as prefetch  # noqa: E402
from avatargen.face.choice import reference_lips  # noqa: E402
from avatargen.face.domain import square_is_photo  # noqa: E402
from avatargen.io.image import load_reference  # noqa: E402
from tests import cli_fork  # noqa: E402
from tests.conftest import REPO, run_cli  # noqa: E402
from tests.eval import clips  # noqa: E402
from tests.face.test_picture_cache import _assert_same, _framed, _fresh_process, _without_networks  # noqa: E402
from tests.ffmpeg_probe import decode_frames  # noqa: E402

AVATAR = REPO / "examples" / "avatar_1.png"


def _env(cache_home: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(cache_home)}


def _searches_of(image: Path) -> list[int]:
    """The live search processes beside a render's start for ``image``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"avatargen.io.image_prefetch" in words and os.fsencode(os.path.abspath(image)) in words:
            found.append(int(cmdline.parent.name))
    return found


def _fresh_render(*args: str, cache_home: Path, cwd: Path) -> subprocess.CompletedProcess:
    """``python -m avatargen render ARGS`` in a new interpreter, as a user starts it (torch not imported yet)."""
    command = [sys.executable, "-m", "avatargen", "render", *args]
    return subprocess.run(command, capture_output=True, text=True, env=_env(cache_home), cwd=cwd, timeout=300)


@pytest.mark.parametrize("picture", ["astronaut", "avatar"])
def test_what_the_search_beside_the_start_found_frames_the_picture_without_networks(tmp_path, monkeypatch, picture):
    path = tmp_path / "picture.png"
    if picture == "avatar":
        shutil.copy(AVATAR, path)
    else:
        clips.write_png(path, clips.astronaut())
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "searched_here"))
    _fresh_process(monkeypatch)
    searched_here = _framed(path)  # the render's own search, in this process

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "searched_beside"))
    assert not prefetch.searched_before(path)
    search = subprocess.Popen([sys.executable, "-m", "avatargen.io.image_prefetch", str(path), str(os.getpid())],
                              stdin=subprocess.PIPE, text=True, env=_env(tmp_path / "searched_beside"))  # fmt: skip
    search.communicate("256 0\n", timeout=120)
    assert search.returncode == 0
    assert prefetch.searched_before(path)
    _fresh_process(monkeypatch)
    _without_networks(monkeypatch)
    _assert_same(_framed(path), searched_here)

    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))  # the file changed: searched beside again
    assert not prefetch.searched_before(path)


def test_a_search_told_nothing_more_keeps_the_faces_and_ends(tmp_path, monkeypatch):
    """A render that frames by its crop (or ends early) closes the search's input: it stops after its first step."""
    path = clips.write_png(tmp_path / "astronaut.png", clips.astronaut())
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    search = subprocess.Popen([sys.executable, "-m", "avatargen.io.image_prefetch", str(path), str(os.getpid())],
                              stdin=subprocess.PIPE, text=True, env=_env(tmp_path / "cache"))  # fmt: skip
    search.communicate("", timeout=120)
    assert search.returncode == 0 and prefetch.searched_before(path)
    _fresh_process(monkeypatch)
    _without_networks(monkeypatch)
    reference = load_reference(path, 256, "face", lambda line: None)
    assert reference.face is not None and reference_lips(reference.picture, reference.face) is not None
    with pytest.raises(AssertionError, match="face networks"):  # the square's photo verdict was not asked for
        square_is_photo(reference.square, reference.square_face)


def test_no_search_is_started_where_it_cannot_gain(tmp_path, monkeypatch):
    path = clips.write_png(tmp_path / "astronaut.png", clips.astronaut())
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    import torch  # noqa: F401 - a process that imported torch has no start left to overlap

    assert not prefetch.should_start(path)
    prefetch.start(path)
    assert _searches_of(path) == [] and prefetch._running == {}
    monkeypatch.delitem(sys.modules, "torch")  # as a fresh process
    assert prefetch.should_start(path)
    assert not prefetch.should_start(tmp_path / "missing.png")
    monkeypatch.setenv("WORLD_SIZE", "2")  # one of torchrun's ranks
    assert not prefetch.should_start(path)


def test_a_fresh_render_searches_beside_its_start_and_gives_the_same_video(tmp_path, speech_wav):
    image = tmp_path / "avatar.png"
    shutil.copy(AVATAR, image)
    fresh = _fresh_render("-i", str(image), "-a", str(speech_wav), "-o", "fresh.mp4", "-q",
                          cache_home=tmp_path / "fresh_cache", cwd=tmp_path)  # fmt: skip
    assert fresh.returncode == 0, fresh.stderr
    assert _searches_of(image) == []  # none outlives the render
    # torch imported before the CLI runs (tests/cli_fork.py): the render searches itself
    forked_env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(tmp_path / "forked_cache")}
    differing = sorted(k for k in forked_env.keys() | cli_fork.server().env.keys()
                       if forked_env.get(k) != cli_fork.server().env.get(k) and k not in cli_fork.CALL_TIME_VARIABLES)  # fmt: skip
    assert not differing, f"the environment changed since the session began ({differing}): this run would not fork"
    forked = run_cli("render", "-i", str(image), "-a", str(speech_wav), "-o", str(tmp_path / "forked.mp4"), "-q",
                     env_extra={"XDG_CACHE_HOME": str(tmp_path / "forked_cache")})  # fmt: skip
    assert forked.returncode == 0, forked.stderr
    assert fresh.stderr == forked.stderr  # the same notes and warnings
    markers = {name: list((tmp_path / name / "avatargen" / "faces" / "files").glob("*"))
               for name in ("fresh_cache", "forked_cache")}  # fmt: skip
    assert len(markers["fresh_cache"]) == 1 and markers["forked_cache"] == []
    np.testing.assert_array_equal(decode_frames(tmp_path / "fresh.mp4"), decode_frames(tmp_path / "forked.mp4"))


def test_a_render_killed_at_its_start_leaves_no_search_behind(tmp_path, speech_wav):
    image = clips.write_png(tmp_path / "astronaut.png", clips.astronaut())
    render = subprocess.Popen([sys.executable, "-m", "avatargen", "render", "-i", str(image), "-a", str(speech_wav),
                               "-o", str(tmp_path / "out.mp4"), "-q"], env=_env(tmp_path / "cache"),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not _searches_of(image) and render.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        assert _searches_of(image), "no search beside the render's start"
        time.sleep(0.2)  # inside its search (a search that has not begun sees its render gone, and ends)
    finally:
        render.send_signal(signal.SIGKILL)  # the render alone, as the OOM killer would
        render.wait()
    deadline = time.monotonic() + 10
    while _searches_of(image) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _searches_of(image) == []


def test_a_picture_the_search_cannot_read_is_reported_by_the_render(tmp_path, speech_wav):
    image = tmp_path / "broken.png"
    image.write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(200))
    done = _fresh_render("-i", str(image), "-a", str(speech_wav), "-o", "out.mp4", cache_home=tmp_path / "cache",
                         cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "broken.png" in lines[0] and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "out.mp4").exists() and _searches_of(image) == []
