"""The ffmpeg binary and what every ffmpeg subprocess in avatargen shares.

Everything in ``avatargen.io`` that decodes or encodes media goes through one ffmpeg executable (imageio-ffmpeg's
static build: libx264 and aac, no ffprobe), started by ``start_ffmpeg`` and watched by ``StderrTail``. Every path
handed to it goes through ``local_file``.
"""

from __future__ import annotations

import collections
import concurrent.futures.thread  # noqa: F401  (FORK_HOOK_MODULES)
import ctypes
import functools
import logging  # noqa: F401  (FORK_HOOK_MODULES)
import os
import re
import signal
import stat
import subprocess
import sys
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from avatargen.errors import AvatarGenError, BadInputError
from avatargen.io.input_files import check_input_file

STDERR_TAIL_LINES = 50
ANSWER_TIMEOUT_S = 15.0  # reading a file's header takes ffmpeg milliseconds; past this it is not going to answer


class FfmpegError(AvatarGenError):
    """ffmpeg exited with an error that is not the user's input (exit code 1)."""


def local_file(path: str | os.PathLike[str]) -> str:
    """``path`` as an explicit local file for ffmpeg: ``file:PATH``.

    ffmpeg reads a bare name as a URL when it starts with a protocol (``tee:``, ``pipe:``, ``take:``, ``concat:``...)
    and as an option when it starts with ``-``; with ``file:`` it opens exactly that file, whatever the name holds.
    """
    return f"file:{os.fspath(path)}"


class FfmpegUnusable(BadInputError):
    """The ffmpeg avatargen would run is missing or not executable: exit code 2, the message says how to fix it."""


def ffmpeg_path() -> str:
    """Where the ffmpeg avatargen runs is, unchecked: ``IMAGEIO_FFMPEG_EXE`` when set, else imageio-ffmpeg's own."""
    import imageio_ffmpeg  # lazily, so importing avatargen.io never fails on a machine without it

    try:
        return imageio_ffmpeg.get_ffmpeg_exe()
    except RuntimeError as error:  # imageio-ffmpeg found none
        raise FfmpegUnusable(f"no ffmpeg found ({error}); reinstall imageio-ffmpeg, which bundles one") from None


@functools.lru_cache(maxsize=1)
def ffmpeg_exe() -> str:
    """Path of the ffmpeg executable (``ffmpeg_path``), checked to be an executable file: ``FfmpegUnusable`` says what
    to do otherwise (``avatargen doctor`` also runs it and checks its encoders)."""
    path = ffmpeg_path()
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        why = "does not exist" if not os.path.exists(path) else "is not an executable file"
        fix = ("unset IMAGEIO_FFMPEG_EXE or point it to a working ffmpeg" if os.environ.get("IMAGEIO_FFMPEG_EXE")
               else "reinstall imageio-ffmpeg (pip install --force-reinstall imageio-ffmpeg)")  # fmt: skip
        raise FfmpegUnusable(f"ffmpeg '{path}' {why}; {fix} (avatargen doctor checks it)")
    return path


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


@functools.lru_cache(maxsize=1)
def _prctl() -> Callable[..., int] | None:
    """libc's ``prctl``, loaded once in the parent (a child between fork and exec must not load libraries)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child receive SIGKILL when this process dies, SIGKILL included
    (``PR_SET_PDEATHSIG``); None where the kernel has no such call.

    Without it an ffmpeg outlives a killed render: the encoder, its input pipe closed, goes on encoding the rest of
    the audio into a partial MP4 that a ``--resume`` has already taken over. The signal follows the thread that
    started the child, so a child must be started by a thread that outlives it (avatargen starts them on the thread
    that reaps them)."""
    prctl = _prctl()
    if prctl is None:
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before the call above: nobody would send the signal
            os._exit(1)

    return preexec


def start_ffmpeg(
    args: list[str], *, stdin: int | None = None, stdout: int | None = None, pass_fds: tuple[int, ...] = ()
) -> subprocess.Popen:
    """Start ``ffmpeg -hide_banner -nostdin <args>`` with stderr piped (pair it with ``StderrTail``).

    ffmpeg runs in its own process group so that a Ctrl-C at the terminal reaches only Python: the caller then stops
    ffmpeg in order (closing stdin finalises an MP4) instead of racing a SIGINT that ffmpeg handles on its own. It
    dies with this process (``die_with_parent``), whatever kills it.
    """
    cmd = [ffmpeg_exe(), "-hide_banner", "-nostdin", *args]
    return subprocess.Popen(
        cmd,
        stdin=stdin if stdin is not None else subprocess.DEVNULL,
        stdout=stdout if stdout is not None else subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        pass_fds=pass_fds,  # extra pipes (ffmpeg's pipe:N), and descriptors it must hold while it lives
        process_group=0,
        preexec_fn=die_with_parent(),
    )


class StderrTail:
    """Drains a process's stderr on a daemon thread, keeping the last lines.

    Without a reader, ffmpeg blocks once the stderr pipe buffer (64 KiB) fills, and so would whoever feeds it.
    """

    def __init__(
        self, proc: subprocess.Popen, max_lines: int = STDERR_TAIL_LINES, on_line: Callable[[str], None] | None = None
    ) -> None:
        self._on_line = on_line  # sees every line as it arrives (on the draining thread)
        self._lines: collections.deque[str] = collections.deque(maxlen=max_lines)
        self._stream = proc.stderr
        self._thread = threading.Thread(target=self._drain, name="ffmpeg-stderr", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        for raw in self._stream:
            line = raw.decode("utf-8", errors="replace").rstrip()
            self._lines.append(line)
            if self._on_line is not None:
                try:
                    self._on_line(line)
                except Exception:  # noqa: BLE001 - a failing watcher must not stop the draining (ffmpeg would block)
                    self._on_line = None
        self._stream.close()

    def join(self, timeout: float | None = 5.0) -> None:
        """Wait until ffmpeg closed stderr (it has exited), so ``lines`` is complete."""
        self._thread.join(timeout)

    @property
    def lines(self) -> list[str]:
        """The last lines ffmpeg printed, oldest first."""
        return list(self._lines)

    def reason(self) -> str:
        """The last meaningful stderr line (see ``ffmpeg_reason``)."""
        return ffmpeg_reason(self.lines)


_CONTEXT_PREFIX = re.compile(r"^(\[[^\]]*\]\s*)+")  # "[in#0 @ 0x55...] [dec:flac @ 0x...] "
_NOISE = re.compile(
    r"^(frame=|size=|video:|Press \[q\]|Conversion failed|Exiting normally|"
    r"Error opening (input|output) file .*\.$|Terminating thread with return code|"
    r"Task finished with error code|Guessed Channel Layout|Cannot check for SPDIF)"
)
_WRAPPED_REASON = re.compile(r"^Error opening (?:input|output) files?: (.+)$")


def ffmpeg_reason(lines: list[str]) -> str:
    """The last stderr line that says why ffmpeg failed, without the ``[demuxer @ 0x..]`` prefixes.

    ffmpeg ends a failure with generic lines ("Conversion failed!", "Error opening input file x."); the useful
    reason is the last line that is not one of those. Returns "no error message" when there is none.
    """
    for line in reversed(lines):
        text = _CONTEXT_PREFIX.sub("", line.strip()).strip()
        if not text or _NOISE.match(text):
            continue
        wrapped = _WRAPPED_REASON.match(text)
        return wrapped.group(1) if wrapped else text
    return "no error message"


@dataclass
class InputInfo:
    """What ``ffmpeg -i`` says about a media file before decoding it."""

    error: str | None = None  # why ffmpeg could not open it; None when it could
    duration_s: float | None = None  # container duration, absent for some streams ("Duration: N/A")
    start_s: float = 0.0  # when the file's first stream starts ("start: 1.400000": MPEG-TS rarely starts at 0)
    stream_kinds: list[str] = field(default_factory=list)  # "Audio", "Video", ... in stream order
    stream_codecs: list[str] = field(default_factory=list)  # "pcm_f32le", "h264", ... in stream order

    @property
    def audio_codec(self) -> str | None:
        """The codec of the first audio stream (None: no audio stream)."""
        return next((c for k, c in zip(self.stream_kinds, self.stream_codecs) if k == "Audio"), None)


_DURATION = re.compile(r"Duration: (\d+):(\d{2}):(\d{2}(?:\.\d+)?)")
_START = re.compile(r"Duration: .*, start: (-?\d+(?:\.\d+)?)")
_STREAM = re.compile(r"^\s*Stream #\d+:\d+\S*: (\w+): ?(\w*)")


_ahead: dict[tuple, Future] = {}  # file key -> its ``read_input_info`` under way (``read_input_info_ahead``)


# Modules whose import registers a fork hook pair, a lock taken before a fork and released after it in the parent.
# CPython runs the before-fork hooks, then takes the import lock: a module imported by another thread in between adds
# a pair whose release then finds its lock free ("Exception ignored in: <built-in method release of _thread.lock
# object>: RuntimeError: release unlocked lock" on stderr, in 9 of 40 tries of a thread starting children with a
# preexec_fn, as ffmpeg's are, while the main thread imports these two). So this module imports them, before its
# thread that reads a header ahead, the one thread that starts a child while the main thread still imports.
FORK_HOOK_MODULES = ("logging", "concurrent.futures.thread")


def read_input_info_ahead(path: str | Path) -> None:
    """Start ``read_input_info(path)`` on a thread of its own now: its ffmpeg (and the check of the ffmpeg binary,
    ~0.03 s, on the first call of a process) run on another core while this process goes on (a render imports torch
    meanwhile: ~0.09 s of its first frame on a 2-core CPU). Each ``read_input_info`` of the same file, unchanged, takes
    that answer or its error; nothing is said before then."""
    key = _file_key(path)
    if key is None or key in _ahead:
        return
    future: Future = Future()

    def read() -> None:
        try:
            future.set_result(_read_input_info(path))
        except BaseException as error:  # handed to the caller, in its turn
            future.set_exception(error)

    _ahead[key] = future
    threading.Thread(target=read, name="input-info", daemon=True).start()


def _file_key(path: str | Path) -> tuple | None:
    """What tells a file apart from itself changed: its path, inode, size and modification time (None: not a regular
    file, whose reading ahead could take what a pipe holds)."""
    try:
        status = os.stat(path)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(status.st_mode):
        return None
    return os.fspath(path), status.st_ino, status.st_size, status.st_mtime_ns


def read_input_info(path: str | Path) -> InputInfo:
    """Open ``path`` with ``ffmpeg -i`` (no output) and parse its stream list and duration from stderr. An ffmpeg that
    does not answer within ``ANSWER_TIMEOUT_S``, or answers without reading the file (a broken binary), is
    ``FfmpegUnusable`` (exit 2): the input is not blamed for it. A read started ahead (``read_input_info_ahead``) of
    the file as it is now gives its answer."""
    key = _file_key(path)
    future = _ahead.get(key) if key is not None else None
    return future.result() if future is not None else _read_input_info(path)


def _read_input_info(path: str | Path) -> InputInfo:
    exe = ffmpeg_exe()
    try:
        proc = subprocess.run(
            [exe, "-hide_banner", "-nostdin", "-i", local_file(path)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=ANSWER_TIMEOUT_S,
            preexec_fn=die_with_parent(),
        )
    except subprocess.TimeoutExpired:
        raise FfmpegUnusable(f"ffmpeg '{exe}' did not answer in {ANSWER_TIMEOUT_S:g} s reading the header of '{path}'; "
                             "check that it runs (avatargen doctor)") from None  # fmt: skip
    lines = proc.stderr.decode("utf-8", errors="replace").splitlines()
    info = InputInfo()
    # Without an output ffmpeg always exits non-zero; a failed open is told apart by its message.
    if any("Error opening input" in line for line in lines):
        info.error = ffmpeg_reason(lines)
        return info
    if not any(line.startswith("Input #0") for line in lines):  # it never read the file: the binary is broken
        said = ffmpeg_reason(lines) if lines else "no output"
        raise FfmpegUnusable(f"ffmpeg '{exe}' did not read '{path}' (exit code {proc.returncode}: {said}); point "
                             "IMAGEIO_FFMPEG_EXE at a working ffmpeg or reinstall imageio-ffmpeg (avatargen doctor "
                             "checks it)")  # fmt: skip
    for line in lines:
        duration = _DURATION.search(line)
        if duration and info.duration_s is None:
            hours, minutes, seconds = duration.groups()
            info.duration_s = int(hours) * 3600 + int(minutes) * 60 + float(seconds)
        start = _START.search(line)
        if start and not info.start_s:
            info.start_s = float(start.group(1))
        stream = _STREAM.match(line)
        if stream:
            info.stream_kinds.append(stream.group(1))
            info.stream_codecs.append(stream.group(2))
    return info


def read_checked_input(path: Path, kind: str, stream: str, fix: str, failed: str = "opened") -> InputInfo:
    """``read_input_info`` of an input the user gave, after the checks every such file gets, each failure one
    ``BadInputError`` naming the fix: ``path`` exists, is a file, is readable, ffmpeg opens it (the message says it
    could not be ``failed`` by ffmpeg) and it holds a ``stream`` stream ("Audio", "Video"). ``kind`` names the input
    in the messages ("audio", "video")."""
    check_input_file(path, kind, fix)
    info = read_input_info(path)
    if info.error is not None:
        raise BadInputError(f"{kind} file '{path}' could not be {failed} by ffmpeg ({info.error}); {fix}")
    if stream not in info.stream_kinds:
        raise BadInputError(f"file '{path}' has no {stream.lower()} stream; {fix}")
    return info
