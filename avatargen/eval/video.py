"""Video in for evaluation: what ``ffmpeg -i`` says about a file, its frames streamed one at a time, its keyframes.

Metrics never hold the decoded video: ffmpeg writes rgb24 frames (at most ``MAX_ANALYSIS_SIDE`` on the long side,
aspect kept) to a pipe, which is read one frame at a time, so a 5-minute file needs the memory of one frame plus
what each metric keeps per frame (a few dozen floats).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from avatargen.errors import BadInputError
from avatargen.io.ffmpeg import StderrTail, ffmpeg_exe, ffmpeg_reason, local_file, start_ffmpeg
from avatargen.io.input_files import VIDEO_FIX, check_input_file

MAX_ANALYSIS_SIDE = 512  # frames larger than this are scaled down: the face detector needs ~80 px faces, not 4K
_VIDEO_STREAM = re.compile(r"Stream #\d+:\d+\S*: Video: (.*)")
_SIZE = re.compile(r", (\d{1,5})x(\d{1,5})")
_ROTATION = re.compile(r"rotation of (-?[\d.]+) degrees")  # a phone video's display matrix: ffmpeg decodes it upright
MIN_VIDEO_SIDE = 64  # the face detector's smallest input: a smaller frame holds no face to measure
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

    Raises ``BadInputError`` for a missing or unreadable file, a file ffmpeg cannot open, or one without a video
    stream.
    """
    path = Path(path)
    check_input_file(path, "video", VIDEO_FIX)
    proc = subprocess.run(
        [ffmpeg_exe(), "-hide_banner", "-nostdin", "-i", local_file(path)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60,
    )  # fmt: skip
    lines = proc.stderr.decode("utf-8", errors="replace").splitlines()
    if any("Error opening input" in line for line in lines):
        raise BadInputError(f"video file '{path}' could not be opened by ffmpeg ({ffmpeg_reason(lines)}); {VIDEO_FIX}")
    for number, line in enumerate(lines):
        stream = _VIDEO_STREAM.search(line)
        if not stream:
            continue
        rest = stream.group(1)
        size = _SIZE.search(rest)
        rate = _TBR.search(rest) or _FPS.search(rest)
        if size is None or rate is None:
            raise BadInputError(f"video file '{path}' does not state its frame size and rate; re-encode it")
        fps = float(rate.group(1)) * (1000.0 if rate.group(2) else 1.0)
        width, height = int(size.group(1)), int(size.group(2))
        if _quarter_turned(lines[number + 1 :]):  # decoded upright: the stored width is the shown height
            width, height = height, width
        if min(width, height) < MIN_VIDEO_SIDE:
            raise BadInputError(f"video file '{path}' is {width}x{height}, too small to hold a face; give a video of "
                                f"at least {MIN_VIDEO_SIDE}x{MIN_VIDEO_SIDE}")  # fmt: skip
        return VideoInfo(width=width, height=height, fps=fps)
    raise BadInputError(f"file '{path}' has no video stream; {VIDEO_FIX}")


def _quarter_turned(after_stream: list[str]) -> bool:
    """Whether the stream's side data (the lines after its own, up to the next stream) turn it by 90 or 270 degrees."""
    for line in after_stream:
        if "Stream #" in line:
            return False
        turn = _ROTATION.search(line)
        if turn is not None:
            return round(abs(float(turn.group(1)))) % 180 == 90
    return False


_PTS_TIME = re.compile(r"pts_time:\s*(-?[\d.]+)")


def video_start_s(path: str | Path) -> float:
    """When the first frame of the video stream is shown on the file's timeline (0 for most files; a video stream
    that starts after its file's audio, an edit list, an editor's export: its delay). 0 where it cannot be read."""
    done = subprocess.run(
        [ffmpeg_exe(), "-hide_banner", "-nostdin", "-i", local_file(Path(path)), "-map", "0:v:0", "-frames:v", "1",
         "-vf", "showinfo", "-f", "null", "-"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60,
    )  # fmt: skip
    found = _PTS_TIME.search(done.stderr.decode("utf-8", errors="replace"))
    return max(float(found.group(1)), 0.0) if found else 0.0


def analysis_size(info: VideoInfo) -> tuple[int, int]:
    """(width, height) the frames are analysed at: the stored size, scaled down to ``MAX_ANALYSIS_SIDE`` (even)."""
    scale = min(1.0, MAX_ANALYSIS_SIDE / max(info.width, info.height))
    return max(2, int(info.width * scale) // 2 * 2), max(2, int(info.height * scale) // 2 * 2)


def iter_frames(path: str | Path, size: tuple[int, int]) -> Iterator[np.ndarray]:
    """Yield every stored frame of the first video stream as an (height, width, 3) uint8 RGB array, ``size`` =
    (width, height).

    Frames come as stored (``-fps_mode passthrough``: none dropped or duplicated), so frame indices match the
    encoder's, which is what seam indices refer to. Raises ``BadInputError`` when the stream fails to decode or
    holds no frame; the decoder is stopped when the caller stops iterating.
    """
    path = Path(path)
    proc = start_ffmpeg(
        ["-v", "error", "-i", local_file(path), "-map", "0:v:0", "-an", "-sn", "-fps_mode", "passthrough",
         "-vf", f"scale={size[0]}:{size[1]}:flags=area", "-f", "rawvideo", "-pix_fmt", "rgb24", "pipe:1"],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    stderr = StderrTail(proc)
    width, height = size
    frame_bytes = width * height * 3
    count = 0
    try:
        while True:
            data = proc.stdout.read(frame_bytes)  # blocks until a whole frame or EOF
            if len(data) < frame_bytes:
                break
            count += 1
            yield np.frombuffer(data, dtype=np.uint8).reshape(height, width, 3)
        returncode = proc.wait()
        stderr.join()
        if returncode != 0:
            raise BadInputError(f"video file '{path}' failed to decode after {count} frames ({stderr.reason()})")
        if count == 0:
            raise BadInputError(f"video file '{path}' contains no decodable frame; {VIDEO_FIX}")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()


_PTS_TIME = re.compile(r"pts_time:\s*(-?[\d.]+)")


def keyframe_indices(path: str | Path, fps: float) -> list[int]:
    """Frame indices of the stream's keyframes (I-frames), from decoding only those (fast).

    Seam measures need them: the first frame of a GOP is encoded afresh, so its change from the previous frame
    includes a compression "pop" that is not in the content. Returns [] when ffmpeg reports none.
    """
    proc = subprocess.run(
        [ffmpeg_exe(), "-hide_banner", "-nostdin", "-skip_frame", "nokey", "-i", local_file(path), "-map", "0:v:0",
         "-vf", "showinfo", "-fps_mode", "passthrough", "-f", "null", "-"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=600,
    )  # fmt: skip
    times = [float(m.group(1)) for m in _PTS_TIME.finditer(proc.stderr.decode("utf-8", errors="replace"))]
    if not times:
        return []
    start = times[0]
    return sorted({int(round((t - start) * fps)) for t in times})
