"""The suite's forked CLI runs (tests/cli_fork.py) behave as fresh ``python -m avatargen`` processes: the same exit
code, stdout and stderr; the caller's stdin; a timeout that kills the run and what it started; and a fresh
interpreter wherever the environment differs in something read at import."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import cli_fork
from tests.conftest import REPO, descendants, write_face_png

def _env() -> dict[str, str]:
    return {**cli_fork.server().env}


def _fresh(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "avatargen", *args], capture_output=True, text=True, env=_env(),
                          timeout=300, **kwargs)  # fmt: skip


def test_a_forked_run_prints_and_exits_as_a_fresh_one(tmp_path: Path) -> None:
    image = write_face_png(tmp_path / "face.png")
    (tmp_path / "noise.wav").write_bytes(os.urandom(4000))
    for args in (["render", "-i", str(image), "-a", str(tmp_path / "noise.wav"), "-o", str(tmp_path / "o.mp4")],
                 ["render", "-i", str(tmp_path / "missing.png"), "-a", "x.wav", "-o", "o.mp4", "--json"],
                 ["--version"]):  # fmt: skip
        forked, fresh = cli_fork.run(args, _env(), cwd=str(tmp_path)), _fresh(*args, cwd=tmp_path)
        assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert not (tmp_path / "o.mp4").exists()


def test_stdin_is_the_callers_and_a_timeout_kills_the_run_and_its_children(tmp_path: Path) -> None:
    image = write_face_png(tmp_path / "face.png")
    args = ["render", "-i", str(image), "-a", "-", "-o", str(tmp_path / "o.mp4"), "model.weights=random"]
    garbage = cli_fork.run(args, _env(), input=b"not a wav file at all" * 10)
    assert garbage.returncode == 2 and "no WAV header on stdin" in garbage.stderr

    read_end, write_end = os.pipe()  # stdin that never ends: the render waits for audio
    with os.fdopen(read_end, "rb") as stdin, pytest.raises(subprocess.TimeoutExpired):
        cli_fork.run(args, _env(), stdin=stdin, timeout=8)
    os.close(write_end)
    server = cli_fork.server().process.pid
    deadline = time.monotonic() + 10
    while descendants(server) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert descendants(server) == []


def test_an_environment_read_at_import_gets_a_fresh_interpreter() -> None:
    assert cli_fork.forkable({**_env(), "XDG_CACHE_HOME": "/elsewhere"}, {"timeout": 5})
    for changed in ({"OMP_NUM_THREADS": "1"}, {"PYTHONPATH": str(REPO / "elsewhere")}, {"MALLOC_ARENA_MAX": "2"}):
        assert not cli_fork.forkable({**_env(), **changed}, {})
    assert not cli_fork.forkable(_env(), {"stdout": subprocess.DEVNULL})
