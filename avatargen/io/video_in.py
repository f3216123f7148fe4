"""Video in: a source video's frames for dubbing (``--video``), read through one ffmpeg pipe, one frame in memory.

Frames come at the render's frame rate by timestamp (ffmpeg's ``fps`` filter): a 25 fps source gives its own
frames, one at another constant rate or a variable-frame-rate phone video gives the frame shown at each 1/25 s.
They come upright: ffmpeg applies a rotated phone video's display matrix, so a portrait video shot as a 1920x1080
stream with a 90-degree rotation comes out 1080x1920. Any resolution is read as it is (a 4K frame is 25 MB; the
reference picture and every later frame are framed from it the same way), one frame at a time; the source's audio
is not read (the new speech is the audio). Past the source's last frame the last frame is given again.
"""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import numpy as np
from PIL import Image

from avatargen.errors import BadInputError
from avatargen.io.ffmpeg import StderrTail, local_file, read_checked_input, start_ffmpeg
from avatargen.io.input_files import VIDEO_FIX


class VideoFrames:
    """A source video as a ``FrameSource`` (avatargen/pipeline/inputs.py): ``frame(i)`` for nondecreasing ``i``.

    The file is checked when the source is built (missing, unreadable, no video stream, no decodable frame: one-line
    ``BadInputError``s), and its first frame is decoded then, which gives the size of every frame (``size``)."""

    def __init__(self, path: str | Path, fps: int) -> None:
        self.path, self.fps = Path(path), fps
        info = read_checked_input(self.path, "video", "Video", VIDEO_FIX)
        self.duration_hint = info.duration_s
        self.size = self._first_frame_size()  # (height, width), upright
        self._proc: subprocess.Popen | None = None
        self._stderr: StderrTail | None = None
        self._current: tuple[int, np.ndarray] | None = None  # the latest frame the pipe gave, and its index
        self.ended = False  # the pipe gave its last frame
        self.frames_read = 0  # frames the pipe gave, over all its runs

    def _first_frame_size(self) -> tuple[int, int]:
        proc = subprocess.run(
            [*_ffmpeg(), "-v", "error", "-i", local_file(self.path), "-map", "0:v:0", "-frames:v", "1",
             "-f", "image2pipe", "-c:v", "png", "pipe:1"],
            stdin=subprocess.DEVNULL, capture_output=True, timeout=120,
        )  # fmt: skip
        if proc.returncode != 0 or not proc.stdout:
            reason = proc.stderr.decode("utf-8", errors="replace").strip().splitlines()
            raise BadInputError(f"video '{self.path}' has no decodable frame ({reason[-1] if reason else 'empty'}); {VIDEO_FIX}")
        with Image.open(io.BytesIO(proc.stdout)) as image:
            return image.height, image.width

    def _start(self) -> None:
        self.close()
        height, width = self.size
        self._proc = start_ffmpeg(
            ["-v", "error", "-i", local_file(self.path), "-map", "0:v:0", "-an",
             # frames by timestamp at the render's rate; one size throughout, should the stream change it
             "-vf", f"fps={self.fps},scale={width}:{height}", "-f", "rawvideo", "-pix_fmt", "rgb24", "pipe:1"],
            stdout=subprocess.PIPE,
        )  # fmt: skip
        self._stderr = StderrTail(self._proc)
        self._current, self.ended = None, False

    def frame(self, index: int) -> np.ndarray:
        """Frame ``index`` (uint8 (H, W, 3)) at the render's rate; past the end, the last frame."""
        if self._current is not None and index < self._current[0]:
            self._start()  # an earlier frame: read again from the start
        if self._proc is None and not self.ended:
            self._start()
        height, width = self.size
        size = height * width * 3
        while not self.ended and (self._current is None or self._current[0] < index):
            data = self._proc.stdout.read(size)
            if len(data) < size:
                self._finish()
                break
            number = 0 if self._current is None else self._current[0] + 1
            self._current = (number, np.frombuffer(data, dtype=np.uint8).reshape(height, width, 3))
            self.frames_read += 1
        return self._current[1]

    def _finish(self) -> None:
        proc, stderr = self._proc, self._stderr
        self.ended, self._proc = True, None
        returncode = proc.wait()
        proc.stdout.close()
        stderr.join()
        if self._current is None:
            raise BadInputError(f"video '{self.path}' gave no frame ({stderr.reason() if returncode else 'empty'}); {VIDEO_FIX}")

    def close(self) -> None:
        """Stop the decoder, if it runs."""
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()
            if self._proc.stdout is not None:
                self._proc.stdout.close()
            self._proc = None


def _ffmpeg() -> list[str]:
    from avatargen.io.ffmpeg import ffmpeg_exe

    return [ffmpeg_exe(), "-hide_banner", "-nostdin"]
