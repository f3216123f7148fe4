"""The top-level boxes of an MP4 file, read without ffmpeg: where a partial video's complete fragments end
(avatargen/io/mp4_join.py) and where its header is (avatargen/io/owned_names.py)."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import BinaryIO


def top_level_boxes(file: BinaryIO, size: int) -> Iterator[tuple[bytes, int, int]]:
    """``(kind, offset, length)`` of each complete top-level box of the ``size`` bytes of ``file``, in order; ends at
    the first box that is cut short or malformed (after a SIGKILL the last fragment may be cut anywhere)."""
    offset = 0
    while offset + 8 <= size:
        file.seek(offset)
        header = file.read(16)
        length, kind = struct.unpack(">I4s", header[:8])
        if length == 1 and len(header) == 16:  # a 64-bit length follows the kind
            length = struct.unpack(">Q", header[8:16])[0]
        elif length == 0:  # "to the end of the file": only a finished file says that
            length = size - offset
        if length < 8 or offset + length > size:
            return
        yield kind, offset, length
        offset += length
