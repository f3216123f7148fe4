"""The one writer of a command's stdout and stderr.

stdout carries what a command was asked for (a report, the config, the version): when it cannot take it (``> /dev/full``,
a reader that left the pipe, a full disk) the command ends with one line on stderr and exit code 2
(``StdoutLostError``), never a traceback; files it wrote before stay. A closed pipe is treated the same way: the
output asked for was not delivered, which a script must be able to tell (exit 2, not 0).

stderr carries words for people (notes, warnings, the error line): when it cannot take them they are dropped and the
work goes on: a render never stops because a warning could not be printed. ``guard_standard_streams`` installs both
rules on ``sys.stdout``/``sys.stderr`` for the whole process (every ``print``, Click's and rich's output included).
"""

from __future__ import annotations

import errno
import os
import sys
from typing import Any, TextIO

from avatargen.errors import AvatarGenError, EXIT_BAD_INPUT

# Errors of a stream that cannot take what is written to it (any other OSError is a bug and stays one).
LOST = (errno.EPIPE, errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EIO, errno.EBADF, errno.ECONNRESET)


class Note(str):
    """A line for people that says what kind of note it is, so that a caller may act on the kind (a batch leaves out
    ``RANDOM_WEIGHTS``, said once per job otherwise) without matching its text. It is the line itself everywhere
    else."""

    kind: str

    def __new__(cls, kind: str, text: str) -> "Note":
        note = super().__new__(cls, text)
        note.kind = kind
        return note

    def __reduce__(self) -> tuple:
        return Note, (self.kind, str(self))  # it crosses processes whole (a Ray worker's notes reach its driver)


RANDOM_WEIGHTS = "random_weights"  # the render's models are untrained: its video is noise


def kind_of(message: str) -> str | None:
    """The kind of ``message`` when it is a ``Note``, else None."""
    return message.kind if isinstance(message, Note) else None


class StdoutLostError(AvatarGenError):
    """stdout could not take a command's output (exit 2, as a full disk is); files already written are kept."""

    exit_code = EXIT_BAD_INPUT


def _silence(fd: int) -> None:
    """Point descriptor ``fd`` at /dev/null: what is still buffered for it, and any later write, goes nowhere quietly
    (no 'Exception ignored' from the interpreter's exit)."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)
    except OSError:
        pass


def _lost_message(err: OSError, what: str) -> str:
    return (f"{what} could not be written to stdout ({err.strerror or err}); give stdout room, keep its reader open, "
            "or redirect it elsewhere")  # fmt: skip


class _Guarded:
    """A text stream proxy: writes and flushes go to ``stream`` at once; an error of ``LOST`` is turned into
    ``StdoutLostError`` (stdout) or dropped (stderr)."""

    def __init__(self, stream: TextIO, is_stdout: bool) -> None:
        self._stream = stream
        self._is_stdout = is_stdout
        self._lost = False

    def _failed(self, err: OSError) -> None:
        if err.errno not in LOST:
            raise err
        already = self._lost
        self._lost = True
        try:
            _silence(self._stream.fileno())
        except (OSError, ValueError):
            pass
        if self._is_stdout and not already:
            raise StdoutLostError(_lost_message(err, "the output")) from None

    def write(self, text: str) -> int:
        if self._lost:
            if self._is_stdout:
                raise StdoutLostError("stdout could not take the output (it failed before); redirect it elsewhere")
            return len(text)
        try:
            written = self._stream.write(text)
            self._stream.flush()
            return written
        except OSError as err:
            self._failed(err)
            return len(text)

    def flush(self) -> None:
        if self._lost:
            return
        try:
            self._stream.flush()
        except OSError as err:
            self._failed(err)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def guard_standard_streams() -> None:
    """Install the rules above on ``sys.stdout`` and ``sys.stderr`` (once; the CLI's ``main`` does it)."""
    if sys.stdout is not None and not isinstance(sys.stdout, _Guarded):
        sys.stdout = _Guarded(sys.stdout, is_stdout=True)  # type: ignore[assignment]
    if sys.stderr is not None and not isinstance(sys.stderr, _Guarded):
        sys.stderr = _Guarded(sys.stderr, is_stdout=False)  # type: ignore[assignment]


def say(line: str) -> None:
    """One line for people on stderr; dropped when stderr cannot take it (the work goes on)."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def write_stdout(text: str, what: str) -> None:
    """Write ``text`` to stdout at once, unbuffered: a stdout that cannot take it is ``StdoutLostError`` naming
    ``what`` it was (exit 2), not a traceback at the interpreter's exit."""
    try:
        sys.stdout.flush()
        fd = sys.stdout.fileno()
    except StdoutLostError:
        raise StdoutLostError(f"{what} could not be written to stdout (it failed before); redirect it elsewhere") from None
    except (AttributeError, ValueError, OSError):  # not a file (an embedding program's stream): its own buffering
        print(text, end="", flush=True)
        return
    data = text.encode()
    try:
        while data:
            data = data[os.write(fd, data) :]
    except OSError as err:
        if err.errno not in LOST:
            raise
        _silence(fd)
        raise StdoutLostError(_lost_message(err, what)) from None
