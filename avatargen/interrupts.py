"""SIGINT and SIGTERM before a command has handlers of its own (a render's: ``resume.StopRequests``).

From the first lines of ``python -m avatargen`` either signal is recorded (``received``), while the CLI's modules
load; from the CLI's ``main`` on it raises ``Interrupted`` (one recorded before is raised there at once), which the
CLI reports in one line with exit code 130 or 143. During the start-up (Python importing torch, the config loading)
a signal used to end the process with no line, a bare ``error: interrupted`` or a traceback, and SIGTERM with no line
at all. A signal stays recorded: a library that swallows the exception in its own ``except:`` cannot lose it, since a
render that starts after it stops at its first step. This module imports nothing heavy: it is loaded before the CLI.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

from avatargen.errors import EXIT_INTERRUPTED, EXIT_TERMINATED

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_received: int | None = None


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM (``signum``) before a command's own handlers."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _record(signum: int, frame: FrameType | None) -> None:
    global _received
    _received = _received or signum


def _interrupt(signum: int, frame: FrameType | None) -> None:
    _record(signum, frame)
    raise Interrupted(signum)


def record_signals() -> None:
    """Record SIGINT and SIGTERM, raising nothing (while modules load: an exception there would be a traceback)."""
    if threading.current_thread() is threading.main_thread():
        for sig in SIGNALS:
            signal.signal(sig, _record)


def catch_signals() -> None:
    """Make SIGINT and SIGTERM raise ``Interrupted`` in the main thread (idempotent; elsewhere a no-op); one recorded
    before is raised now."""
    if threading.current_thread() is threading.main_thread():
        for sig in SIGNALS:
            signal.signal(sig, _interrupt)
    if _received is not None:
        raise Interrupted(_received)


def received() -> int | None:
    """The first signal ``Interrupted`` was raised for, or None."""
    return _received


def signal_of(error: KeyboardInterrupt) -> int:
    """The signal behind ``error``: its own, or SIGINT (Python's KeyboardInterrupt)."""
    return error.signum if isinstance(error, Interrupted) else signal.SIGINT


def exit_code_of(signum: int) -> int:
    return EXIT_TERMINATED if signum == signal.SIGTERM else EXIT_INTERRUPTED
