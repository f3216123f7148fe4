"""Video out: RGB frames piped into ffmpeg as they are generated, muxed with the input audio into an MP4."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np

from avatargen.errors import BadInputError, DiskFullError
from avatargen.io.ffmpeg import FfmpegError, StderrTail, start_ffmpeg

_AUDIO_RATE = 48000
_NO_SPACE = "No space left on device"
_TOO_LARGE = "File too large"
# Every run of the encoder must turn the same frames into the same bits from a keyframe on, so that a resumed render
# joins its parts into exactly the video an uninterrupted render makes. x264's CRF rate control carries history
# across keyframes (the QP of a P frame follows the blurred complexity of past frames, the QP of a keyframe the
# average QP of past P frames); qcomp=1 makes the QP of every P frame the CRF value itself and ipratio=1 makes
# keyframes use it too, so a fresh encoder and a running one agree from the next keyframe on. Adaptive quantisation
# (within a frame) stays on. Measured at CRF 20 (docs/reliability.md): files 15-33 % smaller, PSNR 0.2-0.7 dB lower.
_X264_PARAMS = "qcomp=1:ipratio=1"
_STOP_TIMEOUT_S = 60.0  # ffmpeg only has to encode the audio tail and write the last fragment


class Mp4Writer:
    """Writes H.264 (yuv420p) + AAC MP4 incrementally; the user's file name appears only when it is complete.

    Frames go to ``<stem>.partial.mp4`` in the output folder (same file system, so ``close()`` renames it into place
    atomically). The MP4 is fragmented (a fragment per keyframe, one keyframe every ``gop_seconds``), so if the
    process is killed the partial file still plays up to the last finished fragment. ``abort()`` stops ffmpeg
    cleanly and keeps the partial file; nothing is written under ``path`` unless ``close()`` succeeds.

    The audio track is ``audio_path`` from ``start_frame / fps`` on, in full (no ``-shortest``): the caller writes
    round(duration * fps) frames so both tracks end within one frame of each other; ``close_partial()`` (a render
    stopped early) trims the audio to the video. ``start_frame`` is the timeline frame of the first frame written (a
    resumed render), ``keyframe_period``/``keyframe_shift`` force an IDR keyframe at every timeline frame ``f`` with
    ``(f + shift) % period == 0``: the render's checkpoints, where a resumed render can start a new part.
    Use as a context manager: an exception aborts, otherwise closes.
    """

    def __init__(
        self,
        path: str | Path,
        width: int,
        height: int,
        fps: int,
        audio_path: str | Path | None,
        crf: int = 20,
        preset: str = "veryfast",
        gop_seconds: float = 1.0,
        start_frame: int = 0,
        keyframe_period: int = 0,
        keyframe_shift: int = 0,
    ) -> None:
        if width <= 0 or height <= 0 or width % 2 or height % 2:
            raise ValueError(f"width and height must be positive and even for yuv420p, got {width}x{height}")
        if fps <= 0 or gop_seconds <= 0:
            raise ValueError(f"fps and gop_seconds must be positive, got {fps} and {gop_seconds}")
        self.path = Path(path)
        self.width, self.height, self.fps = int(width), int(height), int(fps)
        self.frames_written = 0
        self.start_frame = int(start_frame)
        self.first_frame_time: float | None = None
        self._result: Path | None = None  # set once closed or aborted
        self._failure: Exception | None = None  # why ffmpeg died mid-write; close() raises it again

        if audio_path is not None and not Path(audio_path).is_file():
            raise BadInputError(f"audio file '{audio_path}' does not exist; check the path")
        if self.path.is_dir():
            raise BadInputError(f"output path '{self.path}' is a folder; give a file name such as out.mp4")
        self._prepare_folder()
        args = self._ffmpeg_args(audio_path, crf, preset, max(1, round(fps * gop_seconds)), keyframe_period, keyframe_shift)
        self._proc = start_ffmpeg(args, stdin=subprocess.PIPE)
        self._stderr = StderrTail(self._proc)

    @property
    def partial_path(self) -> Path:
        """Where the MP4 is written until ``close()`` renames it to ``path``."""
        return self.path.with_name(f"{self.path.stem}.partial.mp4")

    def _prepare_folder(self) -> None:
        folder = self.path.parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
            # Opening the file now reports an unwritable folder here, not later as an ffmpeg failure mid-render.
            with open(self.partial_path, "wb"):
                pass
        except OSError as err:
            raise BadInputError(
                f"cannot write to output folder '{folder}' ({err.strerror}); choose a writable folder"
            ) from None

    def _ffmpeg_args(
        self, audio_path: str | Path | None, crf: int, preset: str, keyint: int, period: int, shift: int
    ) -> list[str]:
        args = ["-v", "error", "-y",
                "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{self.width}x{self.height}",
                "-framerate", str(self.fps), "-i", "pipe:0"]  # fmt: skip
        if audio_path is not None:
            # 48 kHz keeps AAC's end padding (< 1024 samples, which a fragmented MP4 cannot trim) under one frame.
            if self.start_frame:
                args += ["-ss", f"{self.start_frame / self.fps:.6f}"]
            args += ["-i", str(audio_path), "-map", "0:v:0", "-map", "1:a:0",
                     "-c:a", "aac", "-b:a", "128k", "-ar", str(_AUDIO_RATE)]  # fmt: skip
        args += [
            "-c:v", "libx264", "-preset", preset, "-tune", "zerolatency", "-crf", str(crf), "-pix_fmt", "yuv420p",
            # A fixed GOP (no scene-cut keyframes) bounds what a crash can lose: fragments end at keyframes.
            "-g", str(keyint), "-sc_threshold", "0", "-x264-params", _X264_PARAMS,
            # A fragment per keyframe: the file is valid after every fragment, with no index to write at the end.
            # delay_moov writes the header with the first fragment, once the AAC encoder delay is known: without it
            # the 1024 priming samples are not cut by an edit list and the audio plays 21-128 ms late.
            "-movflags", "+frag_keyframe+empty_moov+delay_moov+default_base_moof", "-flush_packets", "1",
        ]  # fmt: skip
        if period > 0:
            # n counts the frames of this run; the checkpoints are timeline frames.
            args += ["-force_key_frames", f"expr:eq(mod(n+{self.start_frame + shift},{period}),0)", "-forced-idr", "1"]
        return args + ["-f", "mp4", str(self.partial_path)]

    def write(self, frames: np.ndarray) -> None:
        """Hand frames, uint8 (T, H, W, 3) or one (H, W, 3), to ffmpeg; blocks while ffmpeg catches up."""
        if self._failure is not None:
            raise self._failure
        if self._result is not None:
            raise RuntimeError("Mp4Writer is already closed")
        if frames.ndim == 3:
            frames = frames[None]
        expected = (self.height, self.width, 3)
        if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[1:] != expected:
            raise ValueError(f"frames must be uint8 (T, {self.height}, {self.width}, 3), got {frames.dtype} "
                             f"{frames.shape}")  # fmt: skip
        if self.first_frame_time is None:
            self.first_frame_time = time.perf_counter()
        try:
            self._proc.stdin.write(memoryview(np.ascontiguousarray(frames)).cast("B"))
            self._proc.stdin.flush()
        except BrokenPipeError:
            self._stop()  # reap ffmpeg and collect its stderr: that says why it stopped
            self._failure = self._error("stopped while receiving frames")
            raise self._failure from None
        except OSError as err:
            if err.errno not in (errno.ENOSPC, errno.EFBIG):
                raise
            self._failure = disk_full_error(self.partial_path, err.strerror)
            raise self._failure from None
        self.frames_written += len(frames)

    def close(self) -> Path:
        """Finish the MP4 and rename it to ``path`` (atomically); returns ``path``.

        If ffmpeg failed, raises (``FfmpegError``, or ``BadInputError`` when the disk is full) and leaves the partial
        file where it is.
        """
        if self._failure is not None:
            self._stop()
            raise self._failure
        if self._result is not None:
            return self._result
        returncode = self._stop()
        if returncode != 0:
            self._result = self.partial_path
            raise self._error(f"failed with exit code {returncode}")
        os.replace(self.partial_path, self.path)
        self._result = self.path
        return self.path

    def abort(self) -> Path:
        """Stop ffmpeg cleanly, keep what was written in ``partial_path`` (a playable MP4) and return that path."""
        if self._result is None:
            self._stop()
            self._result = self.partial_path
        return self.partial_path

    def close_partial(self, trim: bool = True) -> Path:
        """Finish the MP4 but keep it at ``partial_path`` (a render stopped early, or one part of a resumed render).

        The encoder reads the audio ahead of the video, so a file closed early ends with up to a second of audio past
        the last frame; ``trim`` cuts it at the video's end with a stream copy (to within one AAC frame, 21 ms).
        """
        if self._result is not None:
            return self._result
        if self._failure is not None:
            self.abort()
            raise self._failure
        returncode = self._stop()
        self._result = self.partial_path
        if returncode != 0:
            raise self._error(f"failed with exit code {returncode}")
        if trim and self.frames_written:
            trim_to_frames(self.partial_path, self.frames_written, self.fps)
        return self.partial_path

    def _stop(self) -> int:
        """Close stdin (ffmpeg then flushes the last fragment and exits) and reap ffmpeg."""
        try:
            self._proc.stdin.close()
        except BrokenPipeError:
            pass  # ffmpeg already exited; its exit code says why
        try:
            returncode = self._proc.wait(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            returncode = self._proc.wait()
        self._stderr.join()
        return returncode

    def _error(self, what: str) -> Exception:
        reason = self._stderr.reason()
        if _NO_SPACE in reason or _TOO_LARGE in reason:
            return disk_full_error(self.partial_path, reason)
        if self._proc.returncode == -signal.SIGXFSZ:
            # Over the file-size limit (ulimit -f, RLIMIT_FSIZE), ffmpeg is killed by SIGXFSZ before it can say so.
            return disk_full_error(self.partial_path, "File too large: the file-size limit (ulimit -f) was reached")
        return FfmpegError(f"ffmpeg {what} writing '{self.partial_path}' ({reason})")

    def __enter__(self) -> Mp4Writer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is not None:
            self.abort()
        else:
            self.close()


def disk_full_error(path: Path, reason: str | None) -> DiskFullError:
    """The one-line error for a full disk or a file-size limit (a ``BadInputError``: exit code 2)."""
    return DiskFullError(
        f"out of disk space or over the file-size limit writing '{path}' ({reason or 'no reason given'}); "
        "free disk space, raise the limit (ulimit -f) or choose another output folder"
    )


def trim_to_frames(path: Path, frames: int, fps: int) -> None:
    """Cut the tracks of fragmented MP4 ``path`` at ``frames / fps`` seconds by a stream copy, replacing it atomically."""
    tmp = path.with_name(f".{path.name}.trim.mp4")
    proc = start_ffmpeg(
        ["-v", "error", "-y", "-i", str(path), "-map", "0", "-c", "copy", "-t", f"{frames / fps:.6f}",
         "-movflags", "+frag_keyframe+empty_moov+delay_moov+default_base_moof", "-f", "mp4", str(tmp)]
    )  # fmt: skip
    stderr = StderrTail(proc)
    returncode = proc.wait()
    stderr.join()
    if returncode != 0:
        tmp.unlink(missing_ok=True)
        reason = stderr.reason()
        if _NO_SPACE in reason or _TOO_LARGE in reason or returncode == -signal.SIGXFSZ:
            raise disk_full_error(path, reason)
        raise FfmpegError(f"ffmpeg could not trim '{path}' ({reason})")
    os.replace(tmp, path)
