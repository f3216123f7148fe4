"""Where a file of a render or a batch lives: a local (or shared) path, or an object in S3-compatible storage.

``s3://bucket/key`` names an object; anything else is a path. ``ObjectUrl`` behaves like the part of ``Path`` the
bulk code needs (``name``, ``stem``, ``suffix``, ``parent``, ``with_name``, ``/``), so a job's inputs and output are
``Where`` values whichever kind they are. Keys are normalised as POSIX paths (``a//b/./c`` is ``a/b/c``); a key that
climbs out of its bucket (``..`` at the top) is refused.
"""

from __future__ import annotations

import functools
import os
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Union

from avatargen.errors import BadInputError

S3_SCHEME = "s3://"


def is_url(text: object) -> bool:
    """Whether ``text`` names an object in a bucket (``s3://...``) rather than a local path."""
    return isinstance(text, (str, ObjectUrl)) and str(text).startswith(S3_SCHEME)


@dataclass(frozen=True, order=True)
class ObjectUrl:
    """``s3://bucket/key``; ``key`` is "" for the bucket itself and never starts or ends with '/' (a folder is a
    key prefix: ``ObjectUrl("b", "out").prefix`` is ``"out/"``)."""

    bucket: str
    key: str

    @classmethod
    def parse(cls, text: str) -> ObjectUrl:
        if not is_url(text):
            raise BadInputError(f"'{text}' is not an object URL; write s3://BUCKET/KEY")
        bucket, _, key = text[len(S3_SCHEME) :].partition("/")
        if not bucket or "/" in bucket or bucket in (".", ".."):
            raise BadInputError(f"'{text}' names no bucket; write s3://BUCKET/KEY")
        return cls(bucket, _normal_key(key, text))

    def __str__(self) -> str:
        return f"{S3_SCHEME}{self.bucket}/{self.key}" if self.key else f"{S3_SCHEME}{self.bucket}"

    @property
    def name(self) -> str:
        return posixpath.basename(self.key)

    @property
    def stem(self) -> str:
        return posixpath.splitext(self.name)[0]

    @property
    def suffix(self) -> str:
        return posixpath.splitext(self.name)[1]

    @property
    def parent(self) -> ObjectUrl:
        return ObjectUrl(self.bucket, posixpath.dirname(self.key))

    @property
    def prefix(self) -> str:
        """The key prefix of the objects 'in' this one as a folder."""
        return f"{self.key}/" if self.key else ""

    def with_name(self, name: str) -> ObjectUrl:
        return ObjectUrl(self.bucket, _normal_key(posixpath.join(posixpath.dirname(self.key), name), name))

    def __truediv__(self, relative: str) -> ObjectUrl:
        return ObjectUrl(self.bucket, _normal_key(posixpath.join(self.key, str(relative)), str(relative)))

    def is_relative_to(self, folder: ObjectUrl) -> bool:
        return self.bucket == folder.bucket and (
            not folder.key or self.key == folder.key or self.key.startswith(folder.prefix)
        )


Where = Union[Path, ObjectUrl]


def _normal_key(key: str, shown: str) -> str:
    normal = posixpath.normpath(key.lstrip("/")) if key.strip("/") else "."
    if normal == ".." or normal.startswith("../"):
        raise BadInputError(f"'{shown}' climbs out of its bucket ('..'); give a key inside it")
    return "" if normal == "." else normal


_OTHER_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")  # http://, https://, ftp://, file://, ...


def where(text: str | Path) -> Where:
    """A path or an object URL from what a user wrote; a URL of another scheme (``http://``) is refused in one line
    (as a path it would read as a folder ``http:``, its '//' collapsed)."""
    if is_url(text):
        return ObjectUrl.parse(str(text))
    if isinstance(text, str) and text.startswith("file://"):
        raise BadInputError(f"'{text}' is a file URL; give the file's path: '{text.removeprefix('file://')}'")
    if isinstance(text, str) and _OTHER_URL.match(text):
        raise BadInputError(f"'{text}' is a URL; avatargen reads local files and s3://BUCKET/KEY objects: download it "
                            "first (curl -o NAME URL) and give the file")  # fmt: skip
    return Path(text)


def mp4_name_problem(output: Where) -> str | None:
    """What is wrong with ``output`` as the name of an MP4 avatargen writes (it ends in .mp4, with a name before
    that), or None."""
    if output.name.lower() == ".mp4":
        return "has no name before .mp4; give one, e.g. talk.mp4"
    if output.suffix.lower() != ".mp4":
        return "must end in .mp4 (the container written is MP4)"
    return None


def resolve_against(base: Where, text: str) -> Where:
    """``text`` (a path, or an object URL) as seen from folder ``base``: URLs and absolute paths stand as they are,
    a relative name is inside ``base`` (a local folder or a bucket prefix)."""
    if is_url(text) or _OTHER_URL.match(text):
        return where(text)
    if isinstance(base, ObjectUrl):
        if text.startswith("/"):
            raise BadInputError(f"'{text}' is a local path, but '{base}' is in a bucket; give an s3:// URL or a name "
                                "relative to it")  # fmt: skip
        return base / text
    return base / text


@functools.lru_cache(maxsize=4096)
def _real_folder(folder: str) -> str:
    return os.path.realpath(folder)


def real_path(path: Path) -> str:
    """The absolute path with links and ``..`` resolved (as far as it exists), its folder's resolution cached: a
    jobs file of a million rows names a few folders, and resolving each path anew costs a system call per part."""
    folder, name = os.path.split(os.fspath(path))
    if name in ("", ".", ".."):
        return os.path.realpath(path)
    return os.path.join(_real_folder(folder or "."), name)


def identity(location: Where) -> str:
    """What tells two outputs apart: the URL, or the real path (``real_path``)."""
    return str(location) if isinstance(location, ObjectUrl) else real_path(location)


def inside(location: Where, folder: Where) -> bool:
    """Whether ``location`` (links resolved) is ``folder`` or below it."""
    if isinstance(location, ObjectUrl) or isinstance(folder, ObjectUrl):
        return isinstance(location, ObjectUrl) and isinstance(folder, ObjectUrl) and location.is_relative_to(folder)
    real, root = real_path(location), _real_folder(os.fspath(folder))
    return real == root or real.startswith(root.rstrip("/") + "/")
