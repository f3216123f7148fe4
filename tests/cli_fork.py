"""Runs ``python -m avatargen ARGS`` as a fork of a process that has already imported torch and the CLI.

Most of a short CLI run's time in the suite is Python importing torch (1 s on a quiet 2-core machine, 3-4 s on a
busy one), paid again by every ``run_cli``. Here one server process per test worker imports what every render
imports anyway (torch, ``avatargen.cli``, ``avatargen.render.session``), then forks a child per run. The child is a
real, separate process: its own pid, stdin, stdout and stderr (pipes the caller made, passed over a Unix socket),
working directory, environment, signals, ``atexit`` handlers and exit code; it runs the package's ``__main__`` as
``python -m avatargen`` does. What it skips is only the import.

``run`` falls back to a fresh interpreter wherever the fork could differ from one: an environment that differs from
the server's in anything read at import time (only ``CALL_TIME_VARIABLES`` may differ), or options other than
``cwd``, ``input``, ``stdin`` (a file), ``text`` and ``timeout``. Start: ``python -m tests.cli_fork SOCKET``.
"""

from __future__ import annotations

import atexit
import functools
import io
import json
import os
import runpy
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# Environment variables the CLI reads when it runs, never at import: a request may differ from the server in these.
CALL_TIME_VARIABLES = ("XDG_CACHE_HOME", "IMAGEIO_FFMPEG_EXE", "PYTEST_CURRENT_TEST", "TORCHINDUCTOR_CACHE_DIR")
SUPPORTED_OPTIONS = {"cwd", "input", "stdin", "text", "timeout"}
START_TIMEOUT_S = 180.0


# --- the server ------------------------------------------------------------------------------------------------------


def serve(path: str) -> None:
    """Import the CLI, listen on ``path``, fork a child per request; exit when the parent process goes away."""
    import torch  # noqa: F401 - what the fork saves
    import avatargen.cli  # noqa: F401
    import avatargen.render.session  # noqa: F401

    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".tmp")
    os.rename(path + ".tmp", path)  # the socket appears ready to connect
    listener.listen(16)
    waiting: dict[int, socket.socket] = {}  # child pid -> its caller's connection
    while os.getppid() == parent:
        if select.select([listener], [], [], 0.02)[0]:
            connection, _ = listener.accept()
            header, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
            pid = os.fork()
            if pid == 0:
                for other in (listener, connection, *waiting.values()):
                    other.close()
                _run_child(json.loads(header), fds)  # never returns
            for fd in fds:
                os.close(fd)
            connection.sendall(f"{pid}\n".encode())
            waiting[pid] = connection
        _report_exits(waiting)


def _report_exits(waiting: dict[int, socket.socket]) -> None:
    while waiting:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        connection = waiting.pop(pid)
        try:
            connection.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
        except OSError:  # the caller gave up (a timeout): nobody to tell
            pass
        connection.close()


def _run_child(request: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: take the caller's pipes as fds 0-2, its directory and environment, run the CLI."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    _fresh_standard_streams()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["avatargen", *request["args"]]
    # A SystemExit from the CLI leaves the interpreter as it would a fresh one: atexit handlers, flushed streams.
    runpy.run_module("avatargen", run_name="__main__", alter_sys=True)
    sys.exit(0)


def _fresh_standard_streams() -> None:
    """``sys.stdin``, ``sys.stdout`` and ``sys.stderr`` over fds 0-2 as Python's start makes them (encoding and errors
    as the server's own got, stdout line-buffered only on a terminal, stderr always), not the server's objects."""

    def stream(fd: int, like: io.TextIOWrapper, line_buffering: bool) -> io.TextIOWrapper:
        raw = io.FileIO(fd, "r" if fd == 0 else "w", closefd=False)
        buffered = io.BufferedReader(raw) if fd == 0 else io.BufferedWriter(raw)
        return io.TextIOWrapper(buffered, encoding=like.encoding, errors=like.errors, newline="\n",
                                line_buffering=line_buffering)

    sys.stdin = sys.__stdin__ = stream(0, sys.__stdin__, False)
    sys.stdout = sys.__stdout__ = stream(1, sys.__stdout__, os.isatty(1))
    sys.stderr = sys.__stderr__ = stream(2, sys.__stderr__, True)


# --- the client ------------------------------------------------------------------------------------------------------


_session_environment: dict[str, str] | None = None


def remember_session_environment() -> None:
    """Keep the environment as it is once the tests are collected (and with them what their imports set: cv2 sets
    ``LD_LIBRARY_PATH``, for one): the server runs in it, whatever a test's fixtures set when it starts."""
    global _session_environment
    _session_environment = {**os.environ, "PYTHONPATH": str(REPO)}


class _Server:
    """This test worker's server, started on first use and stopped when the worker exits. Its environment is the
    session's (``remember_session_environment``), not that of the test that happens to start it: a test that sets
    variables for its servers (Ray, S3 credentials) would otherwise send every later run to a fresh interpreter."""

    def __init__(self) -> None:
        self.env = _session_environment or {**os.environ, "PYTHONPATH": str(REPO)}
        self.folder = tempfile.mkdtemp(prefix="avatargen-cli-fork-")
        self.path = os.path.join(self.folder, "socket")
        log = open(os.path.join(self.folder, "server.log"), "wb")  # noqa: SIM115 - the server's own errors
        self.process = subprocess.Popen([sys.executable, "-m", "tests.cli_fork", self.path], cwd=REPO, env=self.env,
                                        stdin=subprocess.DEVNULL, stdout=log, stderr=log)  # fmt: skip
        atexit.register(self.stop)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not os.path.exists(self.path):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the CLI fork server did not start: {Path(log.name).read_text()[-2000:]}")
            time.sleep(0.02)

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


@functools.cache
def server() -> _Server:
    """This worker's server (started here on first use)."""
    return _Server()


def forkable(env: dict[str, str], options: dict[str, Any]) -> bool:
    """Whether a run with ``env`` and ``options`` behaves in a fork as in a fresh interpreter."""
    if not set(options) <= SUPPORTED_OPTIONS or not hasattr(options.get("stdin", sys.stdin), "fileno"):
        return False
    base = server().env
    differing = {key for key in env.keys() | base.keys() if env.get(key) != base.get(key)}
    return differing <= set(CALL_TIME_VARIABLES)


def run(args: list[str], env: dict[str, str], cwd: str | None = None, input: bytes | str | None = None,
        stdin: Any = None, text: bool = True, timeout: float | None = None) -> subprocess.CompletedProcess:
    """``subprocess.run([python, -m, avatargen, *args], capture_output=True, ...)`` in a forked child; raises
    ``subprocess.TimeoutExpired`` (the child and its descendants killed) as ``subprocess.run`` does."""
    child_in, feed = os.pipe() if stdin is None else (os.dup(stdin.fileno()), None)
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(server().path)
    header = json.dumps({"args": args, "env": env, "cwd": str(cwd or os.getcwd())}).encode()
    socket.send_fds(connection, [header], [child_in, out_write, err_write])
    for fd in (child_in, out_write, err_write):
        os.close(fd)
    replies = connection.makefile("r")
    pid = int(replies.readline())

    data = input.encode() if isinstance(input, str) else input
    outputs: dict[int, bytes] = {}
    threads = [threading.Thread(target=_read_all, args=(fd, outputs), daemon=True) for fd in (out_read, err_read)]
    if feed is not None:
        threads.append(threading.Thread(target=_write_all, args=(feed, data or b""), daemon=True))
    for thread in threads:
        thread.start()
    connection.settimeout(timeout)
    try:
        returncode = int(replies.readline())
    except (TimeoutError, socket.timeout):
        from tests.conftest import kill_tree

        kill_tree(pid)
        raise subprocess.TimeoutExpired([sys.executable, "-m", "avatargen", *args], timeout) from None
    finally:
        connection.close()
    for thread in threads:
        thread.join()
    stdout, stderr = outputs[out_read], outputs[err_read]
    if text:  # decoded as subprocess.run(text=True) does, universal newlines included
        decoded = [data.decode().replace("\r\n", "\n").replace("\r", "\n") for data in (stdout, stderr)]
        return subprocess.CompletedProcess(args, returncode, *decoded)
    return subprocess.CompletedProcess(args, returncode, stdout, stderr)


def _read_all(fd: int, into: dict[int, bytes]) -> None:
    with os.fdopen(fd, "rb") as stream:
        into[fd] = stream.read()


def _write_all(fd: int, data: bytes) -> None:
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except BrokenPipeError:  # the CLI stopped reading: as subprocess.run ignores it
        pass
    finally:
        os.close(fd)


if __name__ == "__main__":
    serve(sys.argv[1])
