"""The first checks every input file a user names gets, before it is opened: it exists, it is a file, it can be
read. Each failure is one ``BadInputError`` (exit 2) naming the fix. The readers (io/image.py, io/audio.py,
io/video_in.py, eval/video.py) make them as they open a file; a render makes them all before it imports torch
(render/request.py, ``check_request``), so that a wrong path is said at once."""

from __future__ import annotations

import os
from pathlib import Path

from avatargen.errors import BadInputError

IMAGE_FIX = "give a PNG, JPEG or WebP image"
AUDIO_FIX = "give a wav/flac/mp3/ogg/m4a file"
VIDEO_FIX = "give a video file (mp4, mov, mkv, webm) with a picture"


def check_input_file(path: Path, kind: str, fix: str) -> None:
    """Refuse ``path`` unless it is a readable file; ``kind`` ("image", "audio", "video") names it in the message."""
    if not path.exists():
        raise BadInputError(f"{kind} file '{path}' does not exist; check the path")
    if not path.is_file():
        raise BadInputError(f"{kind} path '{path}' is not a file; {fix}")
    if not os.access(path, os.R_OK):
        raise BadInputError(f"{kind} file '{path}' is not readable; fix its permissions")
