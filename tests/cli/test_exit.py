"""A command ends without the interpreter's teardown, yet as any exit ends it: its exit code, its atexit handlers
run, everything it wrote out; where the teardown could still have work (a thread still running), it ends as
Python ends it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests.conftest import REPO


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=REPO,
                          timeout=120)  # fmt: skip


def test_an_ended_command_exits_with_its_code_after_its_atexit_handlers_and_all_it_wrote():
    done = _python("""
        import atexit, sys
        from avatargen import cli
        atexit.register(lambda: print(" handler ran", end=""))
        sys.stdout.write("report")  # buffered, not flushed yet
        sys.stderr.write("a note")
        cli._exit_without_teardown(3)
        print("the ordinary exit")
    """)
    assert (done.returncode, done.stdout, done.stderr) == (3, "report handler ran", "a note")


def test_a_thread_still_running_keeps_the_ordinary_exit():
    done = _python("""
        import threading, time
        from avatargen import cli
        threading.Thread(target=time.sleep, args=(0.3,)).start()
        cli._exit_without_teardown(3)
        print("the ordinary exit")
    """)
    assert (done.returncode, done.stdout.strip()) == (0, "the ordinary exit")


def test_a_render_ends_with_its_report_and_exit_code(tmp_path, speech_wav, face_png):
    done = subprocess.run([sys.executable, "-m", "avatargen", "render", "-i", str(face_png), "-a", str(speech_wav),
                           "-o", str(tmp_path / "out.mp4"), "--json", "-q"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert '"frames": 75' in done.stdout.strip().splitlines()[-1]
    assert (tmp_path / "out.mp4").is_file() and (tmp_path / "out.yaml").is_file()
