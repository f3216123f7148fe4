"""One writer per output: an advisory lock on ``OUT.lock`` beside ``OUT.mp4``, held while a render writes it.

The lock is ``flock`` on an open file, so the kernel releases it when the holder dies, SIGKILL included: a killed
render never leaves an output stuck. The file holds who has it (pid, host, start time) so the next writer can name
the running one. ``OutputLock.try_acquire`` never waits, which is also how ``avatargen batch`` workers claim jobs.

The holder deletes the file when it is done, while it still holds the lock; a writer that opened the file just before
that finds, once it has the lock, that the path names another file (or none) and tries again. So at most one process
ever holds the lock of the file that ``OUT.lock`` names.

Across machines the lock is only as good as the shared file system's: local file systems, NFSv4 and Lustre/GPFS/
CephFS (with their lock managers on) enforce ``flock`` between hosts; NFSv3 needs a running lockd, and some FUSE file
systems do not lock at all (docs/distributed.md).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from avatargen.errors import BadInputError, DiskFullError
from avatargen.io.owned_names import OVERWRITE_FIX, open_no_follow


_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # a full disk, a quota, a file-size limit (ulimit -f)


class OutputLockedError(BadInputError):
    """Another live process is writing this output. Exit code 2."""


def lock_path_for(output: Path) -> Path:
    """The lock file of output ``OUT.mp4``: ``OUT.lock`` beside it."""
    return output.with_name(f"{output.stem}.lock")


@dataclass(frozen=True)
class LockHolder:
    """Who holds (or last held) an output's lock, as written in the lock file."""

    pid: int | None = None
    host: str | None = None
    started: float | None = None  # Unix time

    def describe(self) -> str:
        if self.pid is None:
            return "another avatargen process"
        when = time.strftime(" since %Y-%m-%d %H:%M:%S UTC", time.gmtime(self.started)) if self.started else ""
        return f"avatargen pid {self.pid} on host {self.host}{when}"


def read_holder(lock_file: Path) -> LockHolder:
    """The holder the lock file names (fields None when it is empty, being written, or unreadable)."""
    try:
        data = json.loads(lock_file.read_text())
        return LockHolder(int(data["pid"]), str(data["host"]), float(data["started"]))
    except (OSError, ValueError, KeyError, TypeError):
        return LockHolder()


class OutputLock:
    """The lock of one output file (``OUT.lock``; ``path``: another lock file, a publish target's). ``try_acquire()``
    or ``acquire()``, then ``release()`` (or use ``with``)."""

    def __init__(self, output: Path, path: Path | None = None):
        self.output = Path(output)
        self.path = Path(path) if path is not None else lock_path_for(self.output)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def fileno(self) -> int:
        """The descriptor the lock is held on: a child process that inherits it holds the lock until it exits too."""
        if self._fd is None:
            raise ValueError(f"the lock of '{self.output}' is not held")
        return self._fd

    def try_acquire(self) -> bool:
        """Take the lock if nobody holds it; never waits. True when this process now holds it."""
        if self._fd is not None:
            return True
        while True:
            try:
                fd = open_no_follow(self.path, os.O_RDWR | os.O_CREAT)  # a link there is refused, never written through
            except OSError as err:
                if err.errno in _FULL:  # no inode left for the file
                    raise DiskFullError(f"cannot create the lock '{self.path}': out of disk space ({err.strerror}); "
                                        "free disk space or choose another output folder") from None  # fmt: skip
                raise
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                os.close(fd)
                if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    return False
                raise
            if _same_file(fd, self.path):
                break
            os.close(fd)  # the holder removed the file as we opened it: lock the one the path names now
        if not _holds_lock_json(fd):
            os.close(fd)
            raise BadInputError(f"'{self.path}' is a file avatargen did not write; this render would replace it: "
                                f"{OVERWRITE_FIX}")  # fmt: skip
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(holder).encode(), 0)
        except OSError as err:
            if err.errno not in _FULL:
                os.close(fd)
                raise
            # Still holding the lock: the empty file this process made goes again, not left behind as a 0-byte lock.
            if _same_file(fd, self.path):
                self.path.unlink(missing_ok=True)
            os.close(fd)
            raise DiskFullError(f"cannot write the lock '{self.path}': out of disk space or over the file-size limit "
                                f"({err.strerror}); free disk space, raise the limit (ulimit -f) or choose another "
                                "output folder") from None  # fmt: skip
        self._fd = fd
        return True

    def acquire(self) -> None:
        """Take the lock, or raise ``OutputLockedError`` naming the process that holds it."""
        if not self.try_acquire():
            raise OutputLockedError(
                f"'{self.output}' is being written by {read_holder(self.path).describe()}; wait for it to finish or "
                f"stop it (its lock is '{self.path}', released when that process ends)"
            )

    def release(self) -> None:
        """Remove the lock file and let the lock go (the removal happens while the lock is still held)."""
        if self._fd is None:
            return
        try:
            if _same_file(self._fd, self.path):
                self.path.unlink(missing_ok=True)
        finally:
            os.close(self._fd)  # closing the last descriptor of the file releases the flock
            self._fd = None

    def __enter__(self) -> OutputLock:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def is_locked(output: Path) -> bool:
    """Whether a live process holds ``output``'s lock now (a moment later it may not)."""
    path = lock_path_for(output)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except (FileNotFoundError, OSError):
        return False  # none, or a link or folder: nobody's lock
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as err:
        if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return True
        raise
    finally:
        os.close(fd)
    return False


def _holds_lock_json(fd: int) -> bool:
    """Whether the file of ``fd`` is empty or holds a lock holder's JSON (what ``try_acquire`` may truncate)."""
    data = os.pread(fd, 4096, 0)
    if not data:
        return True
    try:
        holder = json.loads(data)
    except ValueError:
        return False
    return isinstance(holder, dict) and {"pid", "host", "started"} <= set(holder)


def _same_file(fd: int, path: Path) -> bool:
    try:
        on_disk = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (mine.st_dev, mine.st_ino) == (on_disk.st_dev, on_disk.st_ino)
