"""Paths avatargen writes, checked before anything is written: never one of the inputs (by file identity, so links
and ``d/../x`` count), in a folder that can take a file, under a name the file system allows; and the folders a
command creates for them, removed again when it fails before writing anything into them.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable
from pathlib import Path

from avatargen.errors import BadInputError

DEFAULT_NAME_MAX = 255  # bytes in one file name on every common Linux file system


def same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name one file (device and inode; links followed). A path that does not exist yet is
    no existing file: False."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def refuse_writing_inputs(targets: Iterable[Path], inputs: Iterable[Path], fix: str = "choose another output name") -> None:
    """``BadInputError`` when a path about to be written is one of ``inputs``: writing it would destroy the input."""
    inputs = [Path(i) for i in inputs]
    for target in targets:
        for source in inputs:
            if same_file(Path(target), source):
                raise BadInputError(f"output '{target}' is the input '{source}'; writing it would destroy the input: {fix}")


def symlink_loop(path: Path) -> Path | None:
    """The first folder on the way to ``path`` (or ``path`` itself) that is a symbolic link loop, or None."""
    for candidate in [*reversed(Path(path).parents), Path(path)]:
        try:
            os.stat(candidate)
        except OSError as err:
            if err.errno == errno.ELOOP:
                return candidate
    return None


def nearest_existing(path: Path) -> Path:
    """``path``'s closest ancestor that exists (the folder a new ``path`` would be created under)."""
    for folder in Path(path).parents:
        if os.path.lexists(folder):
            return folder
    return Path(".")


def name_max(folder: Path) -> int:
    """The longest file name, in bytes, the file system of ``folder`` allows."""
    try:
        return int(os.pathconf(folder, "PC_NAME_MAX"))
    except (OSError, ValueError):
        return DEFAULT_NAME_MAX


def write_problem(path: Path) -> str | None:
    """Why a file ``path`` cannot be written, or None; creates nothing. Checks a symbolic link loop on the way, a file
    where a folder must be, a name over the file system's limit, and (by a probe file made and removed at once) that
    the nearest existing folder takes new files."""
    path = Path(path)
    loop = symlink_loop(path.parent)
    if loop is not None:
        return f"'{loop}' is a symbolic link loop"
    base = nearest_existing(path)
    if not base.is_dir():
        return f"'{base}' is a file"
    limit = name_max(base)
    for part in path.parts:
        if len(os.fsencode(part)) > limit:
            return f"the name '{part}' is {len(os.fsencode(part))} bytes, over this file system's limit of {limit}"
    probe = base / f".avatargen-probe-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        return err.strerror or str(err)
    return None


def make_folders(folder: Path) -> list[Path]:
    """Create ``folder`` and its missing parents; returns the folders created, deepest first (for
    ``remove_empty_folders``). Raises ``OSError`` as ``mkdir`` does."""
    missing = [f for f in [Path(folder), *Path(folder).parents] if not os.path.lexists(f)]
    Path(folder).mkdir(parents=True, exist_ok=True)
    return missing


def remove_empty_folders(created: Iterable[Path]) -> None:
    """Remove the folders of ``make_folders`` that are still empty, deepest first: a command that failed before it
    wrote anything leaves no trace."""
    for folder in created:
        try:
            folder.rmdir()
        except OSError:
            return  # not empty (something was written), or gone: its parents stay too
