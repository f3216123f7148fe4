"""Video in for evaluation: what ``ffmpeg -i`` says about a file, and its frames streamed at a small analysis size.

Metrics never hold the decoded video: ffmpeg scales every frame to ``ANALYSIS_SIZE`` x ``ANALYSIS_SIZE`` (area
averaging) and writes rgb24 to a pipe, which is read one frame at a time, so a 5-minute file needs the memory of
one small frame plus what each metric keeps per frame (a few dozen floats).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from avatargen.errors import BadInputError
from avatargen.io.ffmpeg import StderrTail, ffmpeg_exe, ffmpeg_reason, start_ffmpeg

ANALYSIS_SIZE = 64  # every metric works on frames scaled to this square; enough for an 8x8 grid of mouth-sized cells
_FIX = "give an MP4/MOV/MKV/WebM video file"
_VIDEO_STREAM = re.compile(r"Stream #\d+:\d+\S*: Video: (.*)")
_SIZE = re.compile(r", (\d{2,5})x(\d{2,5})")
_TBR = re.compile(r", ([\d.]+)(k?) tbr")
_FPS = re.compile(r", ([\d.]+)(k?) fps")


@dataclass(frozen=True)
class VideoInfo:
    """Size and frame rate of a file's first video stream, as ``ffmpeg -i`` reports them."""

    width: int
    height: int
    fps: float


def probe_video(path: str | Path) -> VideoInfo:
    """Read width, height and frame rate (the stream's ``tbr``) from ``ffmpeg -i`` stderr.

    Raises ``BadInputError`` for a missing file, a file ffmpeg cannot open, or one without a video stream.
    """
    path = Path(path)
    if not path.exists():
        raise BadInputError(f"video file '{path}' does not exist; check the path")
    if not path.is_file():
        raise BadInputError(f"video path '{path}' is not a file; {_FIX}")
    proc = subprocess.run(
        [ffmpeg_exe(), "-hide_banner", "-nostdin", "-i", str(path)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60,
    )  # fmt: skip
    lines = proc.stderr.decode("utf-8", errors="replace").splitlines()
    if any("Error opening input" in line for line in lines):
        raise BadInputError(f"video file '{path}' could not be opened by ffmpeg ({ffmpeg_reason(lines)}); {_FIX}")
    for line in lines:
        stream = _VIDEO_STREAM.search(line)
        if not stream:
            continue
        rest = stream.group(1)
        size = _SIZE.search(rest)
        rate = _TBR.search(rest) or _FPS.search(rest)
        if size is None or rate is None:
            raise BadInputError(f"video file '{path}' does not state its frame size and rate; re-encode it")
        fps = float(rate.group(1)) * (1000.0 if rate.group(2) else 1.0)
        return VideoInfo(width=int(size.group(1)), height=int(size.group(2)), fps=fps)
    raise BadInputError(f"file '{path}' has no video stream; {_FIX}")


def iter_frames(path: str | Path, size: int = ANALYSIS_SIZE) -> Iterator[np.ndarray]:
    """Yield every stored frame of the first video stream as a (size, size, 3) float32 RGB array in 0..255.

    Frames come as stored (``-fps_mode passthrough``: none dropped or duplicated), so frame indices match the
    encoder's, which is what seam indices refer to. Raises ``BadInputError`` when the stream fails to decode or
    holds no frame; the decoder is stopped when the caller stops iterating.
    """
    path = Path(path)
    proc = start_ffmpeg(
        ["-v", "error", "-i", str(path), "-map", "0:v:0", "-an", "-sn", "-fps_mode", "passthrough",
         "-vf", f"scale={size}:{size}:flags=area", "-f", "rawvideo", "-pix_fmt", "rgb24", "pipe:1"],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    stderr = StderrTail(proc)
    frame_bytes = size * size * 3
    count = 0
    try:
        while True:
            data = proc.stdout.read(frame_bytes)  # blocks until a whole frame or EOF
            if len(data) < frame_bytes:
                break
            count += 1
            yield np.frombuffer(data, dtype=np.uint8).reshape(size, size, 3).astype(np.float32)
        returncode = proc.wait()
        stderr.join()
        if returncode != 0:
            raise BadInputError(f"video file '{path}' failed to decode after {count} frames ({stderr.reason()})")
        if count == 0:
            raise BadInputError(f"video file '{path}' contains no decodable frame; {_FIX}")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()
