"""Video out: RGB frames piped into one ffmpeg as they are generated, encoded once, muxed with the audio into an
MP4 and any live outputs (HLS, RTMP, stdout)."""

from __future__ import annotations

import errno
import fcntl
import os
import queue
import re
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import BinaryIO, Callable, Sequence

import numpy as np

from avatargen.errors import BadInputError, DiskFullError, PublishError
from avatargen.io.audio_mix import AudioMix
from avatargen.io.ffmpeg import FfmpegError, StderrTail, ffmpeg_reason, local_file, start_ffmpeg
from avatargen.io.outputs import MP4_MOVFLAGS, Output, OutputKind, mp4_output, tee_event, tee_target
from avatargen.io.owned_names import create_fresh, fd_url, metadata_args, remove_name, ts_metadata_args

ENCODER_AUDIO_RATE = 48000  # the audio track's rate; write_audio() takes stereo s16le at this rate
FRAME_PIPE_BYTES = 1 << 20  # the frame pipe's capacity asked for (Linux's default ceiling for a user: 1 MiB)
_F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ (Linux; Python 3.10+ names it, not on every platform)
_NO_SPACE = "No space left on device"
_TOO_LARGE = "File too large"
_ALONE = (OutputKind.MP4, OutputKind.STDOUT)  # outputs written without the tee muxer when alone
# ffmpeg's word that its only output's muxer failed (stdout's reader gone: "Broken pipe")
_MUXER_FAILED = re.compile(r"\[out#0/\w+ @ \w+\] Task finished with error code: -?\d+ \((.+)\)")
# Every run of the encoder must turn the same frames into the same bits from a keyframe on, so that a resumed render
# joins its parts into exactly the video an uninterrupted render makes. x264's CRF rate control carries history
# across keyframes (the QP of a P frame follows the blurred complexity of past frames, the QP of a keyframe the
# average QP of past P frames); qcomp=1 makes the QP of every P frame the CRF value itself and ipratio=1 makes
# keyframes use it too, so a fresh encoder and a running one agree from the next keyframe on. Adaptive quantisation
# (within a frame) stays on. Measured at CRF 20 (docs/reliability.md): files 15-33 % smaller, PSNR 0.2-0.7 dB lower.
_X264_PARAMS = "qcomp=1:ipratio=1"
# On a machine of two cores or fewer the render keeps one busy: x264's slice threads (zerolatency) would only wait on
# each other there. One thread: a photo with 120 s of speech took 5 % less CPU in ffmpeg, its file 1 % smaller.
_X264_ONE_THREAD_CORES = 2
# Every wait on ffmpeg is bounded by its signs of life, not by a total: a frame's bytes taken from the pipe (writing),
# a change in its -progress reports (closing: frames muxed, audio encoded, bytes written). An ffmpeg that shows none
# for STALL_TIMEOUT_S (stopped, hung, blocked on an output nobody reads) is given up and killed; once a stop was asked
# for (SIGINT/SIGTERM: ``hurry``), or after an error, for STALL_AFTER_STOP_S, so a signal ends the render within that
# time even when the encoder never reads again (docs/reliability.md, "Signals").
STALL_TIMEOUT_S = 60.0
STALL_AFTER_STOP_S = 5.0
_FFMPEG_STOPPED_BY_SIGNAL = 255  # ffmpeg's exit code after a signal it handled (it still finished its outputs)


class Encoder:
    """The encoder: RGB frames piped into one ffmpeg that writes an H.264 (yuv420p) + AAC MP4 and any live outputs.

    Frames go to ``<stem>.partial.mp4`` in the output folder (same file system, so ``close()`` renames it into place
    atomically): the user's file name appears only when it is complete. The MP4 is fragmented (a fragment per
    keyframe, one keyframe every ``gop_seconds``), so if the process is killed the partial file still plays up to the
    last finished fragment. ``abort()`` stops ffmpeg cleanly and keeps the partial file; nothing is written under
    ``path`` unless ``close()`` succeeds. ``path`` None writes no file (only ``outputs``).

    ``outputs`` (``avatargen.io.outputs``: HLS, RTMP, MPEG-TS on stdout) receive the same encoded packets as the file
    (ffmpeg's tee muxer: one encode). With ``drop_failed_live`` a live output that fails is reported to
    ``on_dropped(output, reason)`` and dropped while the rest go on; otherwise its failure ends the encode and
    ``write`` raises ``PublishError``.

    The audio track is ``audio_path`` (a file, or an ``AudioMix`` of several speakers' files) from
    ``start_frame / fps`` on, in full (no ``-shortest``): the caller writes
    round(duration * fps) frames so both tracks end within one frame of each other; ``close_partial()`` (a render
    stopped early) trims the audio to the video. Or, with ``audio_pipe=True``, the caller streams it as 48 kHz
    stereo s16le PCM through ``write_audio`` (audio read from stdin). ``start_frame`` is the timeline frame of the
    first frame written (a resumed render), ``keyframe_period``/``keyframe_shift`` force an IDR keyframe at every
    timeline frame ``f`` with ``(f + shift) % period == 0``: the render's checkpoints, where a resumed render can
    start a new part. ``hold_fds`` are descriptors ffmpeg keeps open while it lives: the output's lock
    (``io.output_lock``), so that the lock is free only once no process writes the output any more. ffmpeg dies with
    this process (``io.ffmpeg.die_with_parent``). ``part_id`` goes into the partial MP4's tag: the run of a render
    that wrote it (``io.resume_store.ResumeStore.part_id``). Use as a context manager: an exception aborts, otherwise
    closes.
    """

    def __init__(
        self,
        path: str | Path | None,
        width: int,
        height: int,
        fps: int,
        audio_path: str | Path | AudioMix | None,
        crf: int = 20,
        preset: str = "veryfast",
        gop_seconds: float = 1.0,
        start_frame: int = 0,
        keyframe_period: int = 0,
        keyframe_shift: int = 0,
        outputs: Sequence[Output] = (),
        drop_failed_live: bool = True,
        on_dropped: Callable[[Output, str], None] | None = None,
        audio_pipe: bool = False,
        hold_fds: tuple[int, ...] = (),
        part_id: str | None = None,
    ) -> None:
        if width <= 0 or height <= 0 or width % 2 or height % 2:
            raise ValueError(f"width and height must be positive and even for yuv420p, got {width}x{height}")
        if fps <= 0 or gop_seconds <= 0:
            raise ValueError(f"fps and gop_seconds must be positive, got {fps} and {gop_seconds}")
        if path is None and not outputs:
            raise ValueError("Encoder needs a path or at least one output")
        self.path = Path(path) if path is not None else None
        self.width, self.height, self.fps = int(width), int(height), int(fps)
        self.frames_written = 0
        self.start_frame = int(start_frame)
        self.first_frame_time: float | None = None
        self._result: Path | None = None  # set once closed or aborted
        self._closed = False
        self._failure: Exception | None = None  # why ffmpeg died mid-write; close() raises it again
        self._hurried = False  # a stop was asked for: ffmpeg gets STALL_AFTER_STOP_S to show a sign of life
        self._stalled = False  # ffmpeg showed none for its time: it is killed, not waited for
        self._last_taken = time.monotonic()  # when ffmpeg last took bytes of a frame
        self._part_id = part_id

        mix = audio_path if isinstance(audio_path, AudioMix) or audio_path is None else AudioMix((Path(audio_path),))
        for file in mix.paths if mix is not None else ():
            if not Path(file).is_file():
                raise BadInputError(f"audio file '{file}' does not exist; check the path")
        self._partial_fd: int | None = None
        if self.path is not None:
            if self.path.is_dir():
                raise BadInputError(f"output path '{self.path}' is a folder; give a file name such as out.mp4")
            self._prepare_folder()
        # ffmpeg writes the partial file this process created, by its descriptor: a link planted at its name after
        # that is never written through.
        partial = [mp4_output(self.partial_path, fd_url(self._partial_fd))] if self._partial_fd is not None else []
        self.outputs = partial + list(outputs)
        # the one output, written by its own muxer (not ffmpeg's tee): an MP4 file, or stdout
        self._alone = self.outputs[0] if len(self.outputs) == 1 and self.outputs[0].kind in _ALONE else None
        self.dropped: dict[str, str] = {}  # label -> why, for live outputs dropped after a failure
        self._open_failure: str | None = None  # the last "error opening" reason ffmpeg gave
        self._aborted: tuple[Output, str | None] | None = None  # the output whose failure ended ffmpeg, and why
        self._drop_failed_live = drop_failed_live
        self._on_dropped = on_dropped
        self._audio_feed: AudioFeed | None = None
        pass_fds: tuple[int, ...] = (self._partial_fd,) if self._partial_fd is not None else ()
        audio_input: list[str] = []
        audio_map = ["-map", "1:a:0"]
        if audio_pipe:
            read_fd, write_fd = os.pipe()
            audio_input = ["-f", "s16le", "-ar", str(ENCODER_AUDIO_RATE), "-ac", "2", "-i", f"pipe:{read_fd}"]
            pass_fds = (*pass_fds, read_fd)
            self._audio_feed = AudioFeed(os.fdopen(write_fd, "wb", buffering=0))  # owns (and closes) write_fd
        elif mix is not None:
            # 48 kHz keeps AAC's end padding (< 1024 samples, which a fragmented MP4 cannot trim) under one frame.
            audio_input, audio_map = mix.ffmpeg_args(1, self.start_frame / self.fps)
        progress_read, progress_write = os.pipe()
        args = ["-progress", f"pipe:{progress_write}", "-stats_period", "0.1"]
        args += self._ffmpeg_args(audio_input, audio_map, crf, preset, max(1, round(fps * gop_seconds)), keyframe_period,
                                  keyframe_shift)  # fmt: skip
        stdout = sys.stdout.fileno() if any(o.kind is OutputKind.STDOUT for o in self.outputs) else None
        if stdout is not None:
            sys.stdout.flush()
        try:
            self._proc = start_ffmpeg(args, stdin=subprocess.PIPE, stdout=stdout,
                                      pass_fds=(*pass_fds, progress_write, *hold_fds))  # fmt: skip
        except BaseException:
            if self._audio_feed is not None:
                self._audio_feed.finish()
            os.close(progress_read)
            raise
        finally:
            for fd in (*pass_fds, progress_write):
                os.close(fd)  # ffmpeg holds its own copy; ours would keep the pipe open after ffmpeg exits
        self._progress = MuxProgress(os.fdopen(progress_read, "rb"))
        self._stderr = StderrTail(self._proc, on_line=self._watch)
        # Frames go through the pipe's descriptor, non-blocking, so that every wait for ffmpeg to take them has a
        # bound (``_send``); the lock keeps a closing thread from closing it under a writing one.
        self._stdin_fd: int | None = self._proc.stdin.fileno()
        os.set_blocking(self._stdin_fd, False)
        widen_pipe(self._stdin_fd)
        self._stdin_lock = threading.Lock()

    @property
    def partial_path(self) -> Path:
        """Where the MP4 is written until ``close()`` renames it to ``path``."""
        if self.path is None:
            raise ValueError("this encoder writes no file")
        return self.path.with_name(f"{self.path.stem}.partial.mp4")

    def _prepare_folder(self) -> None:
        folder = self.partial_path.parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
            # Creating the file now reports an unwritable folder here, not later as an ffmpeg failure mid-render. A
            # fresh file (O_EXCL | O_NOFOLLOW): what was at the name (checked to be avatargen's) is removed, a link
            # as a link.
            self._partial_fd = create_fresh(self.partial_path)
        except OSError as err:
            raise BadInputError(
                f"cannot write to output folder '{folder}' ({err.strerror}); choose a writable folder"
            ) from None

    def _ffmpeg_args(self, audio_input: list[str], audio_map: list[str], crf: int, preset: str, keyint: int, period: int,
                     shift: int) -> list[str]:  # fmt: skip
        args = ["-v", "error", "-y",
                "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{self.width}x{self.height}",
                "-framerate", str(self.fps), "-i", "pipe:0"]  # fmt: skip
        if audio_input:
            args += [*audio_input, "-map", "0:v:0", *audio_map,
                     "-c:a", "aac", "-b:a", "128k", "-ar", str(ENCODER_AUDIO_RATE)]  # fmt: skip
        else:
            args += ["-map", "0:v:0"]  # the tee muxer needs its streams named
        args += [
            "-c:v", "libx264", *_x264_threads(), "-preset", preset, "-tune", "zerolatency", "-crf", str(crf),
            "-pix_fmt", "yuv420p",
            # A fixed GOP (no scene-cut keyframes) bounds what a crash can lose: fragments end at keyframes. It is
            # also the HLS segment length (segments start at keyframes).
            "-g", str(keyint), "-sc_threshold", "0", "-x264-params", _X264_PARAMS,
        ]  # fmt: skip
        if period > 0:
            # n counts the frames of this run; the checkpoints are timeline frames.
            args += ["-force_key_frames", f"expr:eq(mod(n+{self.start_frame + shift},{period}),0)", "-forced-idr", "1"]
        args += metadata_args(self._part_id) + ts_metadata_args()  # a rerun knows its files as its own (io.owned_names)
        if self._alone is not None:
            # An MP4: a fragment per keyframe (MP4_MOVFLAGS): the file is valid after every fragment, with no index to
            # write at the end. delay_moov writes the header with the first fragment, once the AAC encoder delay is
            # known: without it the 1024 priming samples are not cut by an edit list and the audio plays 21-128 ms late.
            # MPEG-TS on stdout: each frame leaves as it is encoded (the tee muxer held each until the next came).
            return args + self._alone.args()
        # Several outputs, or a live one (even alone): the tee muxer names the output that failed ("Slave muxer #N").
        return args + ["-flush_packets", "1", "-f", "tee", tee_target(self.outputs, self._drop_failed_live)]

    def _watch(self, line: str) -> None:
        """Sees ffmpeg's stderr as it comes: a dropped tee slave is reported once, by the name the user gave; the
        slave whose failure ends ffmpeg is kept for ``_error``, as is stdout's muxer's when stdout is alone."""
        if self._alone is not None and self._alone.kind is OutputKind.STDOUT and (failed := _MUXER_FAILED.search(line)):
            self._aborted = (self._alone, failed.group(1))
            return
        event = tee_event(line)
        if event is None:
            return
        if event.kind == "open_failed":
            self._open_failure = event.reason
        elif event.kind == "all_failed":
            for output in self.outputs:
                self.dropped.setdefault(output.label, self._open_failure or "failed")
        elif event.slave is not None and 0 <= event.slave < len(self.outputs):
            output = self.outputs[event.slave]
            if event.kind == "aborted":
                self._aborted = (output, self._open_failure)
            elif output.label not in self.dropped:
                self.dropped[output.label] = event.reason
                if self._on_dropped is not None:
                    self._on_dropped(output, event.reason)

    def write_audio(self, pcm: bytes) -> None:
        """Queue 48 kHz stereo s16le audio for the encoder (``audio_pipe=True``); never blocks the caller."""
        if self._audio_feed is None:
            raise RuntimeError("Encoder was not opened with audio_pipe=True")
        self._audio_feed.put(pcm)

    def hurry(self) -> None:
        """A stop was asked for (safe to call from a signal handler): from now on ffmpeg has STALL_AFTER_STOP_S, not
        STALL_TIMEOUT_S, to show a sign of life before it is given up."""
        self._hurried = True

    @property
    def _stall_limit(self) -> float:
        return STALL_AFTER_STOP_S if self._hurried else STALL_TIMEOUT_S

    def write(self, frames: np.ndarray) -> None:
        """Hand frames, uint8 (T, H, W, 3) or one (H, W, 3), to ffmpeg; blocks while ffmpeg catches up, at most until
        it has taken nothing for its stall limit (``EncoderStalledError``)."""
        if self._failure is not None:
            raise self._failure
        if self._closed:
            raise RuntimeError("Encoder is already closed")
        if frames.ndim == 3:
            frames = frames[None]
        expected = (self.height, self.width, 3)
        if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[1:] != expected:
            raise ValueError(f"frames must be uint8 (T, {self.height}, {self.width}, 3), got {frames.dtype} "
                             f"{frames.shape}")  # fmt: skip
        if self.first_frame_time is None:
            self.first_frame_time = time.perf_counter()
        try:
            self._send(memoryview(np.ascontiguousarray(frames)).cast("B"))
        except EncoderStalledError as error:
            self._failure = error
            raise
        except BrokenPipeError:
            self._stop()  # reap ffmpeg and collect its stderr: that says why it stopped
            self._failure = self._error("stopped while receiving frames")
            raise self._failure from None
        except OSError as err:
            if err.errno not in (errno.ENOSPC, errno.EFBIG):
                raise
            self._failure = disk_full_error(self._where, err.strerror)
            raise self._failure from None
        self.frames_written += len(frames)

    def _send(self, data: memoryview) -> None:
        """Write ``data`` to ffmpeg's stdin, waiting while the pipe is full, at most until ffmpeg has taken nothing
        for its stall limit. ``BrokenPipeError`` once ffmpeg has exited (or the pipe was closed by ``_stop``)."""
        self._last_taken = time.monotonic()
        while data:
            with self._stdin_lock:
                if self._stdin_fd is None:
                    raise BrokenPipeError("the encoder's input is closed")
                try:
                    taken = os.write(self._stdin_fd, data)
                except BlockingIOError:
                    taken = 0
            if taken:
                data, self._last_taken = data[taken:], time.monotonic()
                continue
            if time.monotonic() - self._last_taken > self._stall_limit:
                self._stalled = True
                raise self._stalled_error("took no frame")
            try:
                select.select([], [self._stdin_fd], [], 0.1)
            except (OSError, TypeError, ValueError):
                time.sleep(0.01)  # closed meanwhile by another thread: the next round says so

    def _stalled_error(self, what: str) -> EncoderStalledError:
        return EncoderStalledError(f"ffmpeg (the encoder) {what} for {self._stall_limit:g} s: it is stopped or hung (a "
                                   "SIGSTOP, an output nobody reads, a hung file system); ended it")  # fmt: skip

    def _close_stdin(self) -> None:
        """Close ffmpeg's frame pipe (it then sees the end of the video); never blocks, whatever ffmpeg does."""
        with self._stdin_lock:
            if self._stdin_fd is not None:
                self._stdin_fd = None
                try:
                    self._proc.stdin.close()  # nothing is buffered in it: frames go through the descriptor
                except OSError:
                    pass  # ffmpeg already exited; its exit code says why

    def close(self, before_publish: Callable[[], None] | None = None) -> Path | None:
        """Finish every output and put the MP4 at ``path``; returns ``path`` (None: no file).

        The finished file is the partial one remuxed (stream copy) into a plain MP4 with its index first
        (``finish_mp4``): its header carries the duration, and the AAC priming is cut by an edit list.
        ``before_publish`` runs once that file is complete, just before it is renamed to ``path`` (the sidecar config
        is written there: a kill never leaves ``path`` without it). If ffmpeg failed, raises (``FfmpegError``,
        ``PublishError``, or ``BadInputError`` when the disk is full) and leaves the partial file where it is.
        """
        if self._failure is not None:
            self._stop()
            raise self._failure
        if self._closed:
            return self._result
        returncode = self._stop()
        self._closed = True
        if returncode != 0:
            self._result = self.partial_path if self.path is not None else None
            raise self._error(f"failed with exit code {returncode}")
        if self.path is not None:
            finish_mp4(self.partial_path, self.path, before_publish)
            self._result = self.path
        return self._result

    def abort(self, trim: bool = False) -> Path | None:
        """Stop ffmpeg cleanly, keep what was written in ``partial_path`` (a playable MP4) and return that path.

        ``trim`` cuts its audio at the end of its video as ``close_partial`` does, if ffmpeg ended well; a trim that
        fails leaves the file as it was (it still plays)."""
        if not self._closed:
            self._hurried = True  # an error or a second signal: ffmpeg gets the short limit to finish
            returncode = self._stop(cut_audio=True)
            self._closed = True
            self._result = self.partial_path if self.path is not None else None
            healthy = returncode == 0 and self._failure is None
            if trim and (healthy or self._stalled) and self.frames_written and self._result is not None:
                try:
                    trim_to_frames(self._result, self.frames_written, self.fps, self._part_id)
                except (FfmpegError, DiskFullError, OSError):
                    pass
        return self._result

    def close_partial(self, trim: bool = True) -> Path | None:
        """Finish the MP4 but keep it at ``partial_path`` (a render stopped early, or one part of a resumed render).

        ffmpeg is not left to encode the rest of the audio (hours of it, for a long file stopped early): once it has
        muxed every video frame it is told to finish. It reads the audio ahead of the video, so the file then ends with
        up to a few seconds of audio past the last frame; ``trim`` cuts it at the video's end with a stream copy (to
        within one AAC frame, 21 ms).
        """
        if self._closed:
            return self._result
        if self._failure is not None:
            self.abort()
            raise self._failure
        returncode = self._stop(cut_audio=True)
        self._closed = True
        self._result = self.partial_path if self.path is not None else None
        if returncode != 0:
            raise self._error(f"failed with exit code {returncode}")
        if trim and self.frames_written and self._result is not None:
            trim_to_frames(self._result, self.frames_written, self.fps, self._part_id)
        return self._result

    def _stop(self, cut_audio: bool = False) -> int:
        """Close the inputs (ffmpeg then flushes the last fragment and exits) and reap ffmpeg; an ffmpeg that shows no
        sign of life for its stall limit is killed (its file keeps every fragment it finished).

        ``cut_audio``: the video ends early (a stop, an error), so the audio after it is not wanted: once ffmpeg has
        muxed every frame written it gets SIGINT, on which it stops reading its inputs and finishes its outputs,
        instead of encoding the rest of the audio file first."""
        if self._audio_feed is not None:
            self._audio_feed.finish()  # ffmpeg reads what is queued, then sees the end of the audio
        self._close_stdin()
        told_to_finish = False
        if cut_audio and not self._stalled:
            self._wait_alive(lambda: self._progress.frames >= self.frames_written)
            if self._proc.poll() is None and not self._stalled:
                self._proc.send_signal(signal.SIGINT)
                told_to_finish = True
        if not self._stalled:
            self._wait_alive(lambda: False)
        if self._proc.poll() is None:
            self._proc.kill()  # stalled: SIGKILL ends it even when stopped (SIGSTOP), where SIGINT would wait
        returncode = self._proc.wait()
        if told_to_finish and returncode == _FFMPEG_STOPPED_BY_SIGNAL:
            returncode = 0  # it finished its outputs on the signal, as asked
        if self._audio_feed is not None:
            self._audio_feed.join()
        self._stderr.join()
        self._progress.join()
        return returncode

    def _wait_alive(self, done: Callable[[], bool]) -> None:
        """Wait until ffmpeg has exited or ``done()``, as long as its progress reports change within its stall limit
        (else ``_stalled``)."""
        while self._proc.poll() is None and not done():
            if time.monotonic() - max(self._progress.changed, self._last_taken) > self._stall_limit:
                self._stalled = True
                return
            time.sleep(0.02)

    @property
    def _where(self) -> str:
        return str(self.partial_path) if self.path is not None else ", ".join(o.label for o in self.outputs)

    def _error(self, what: str) -> Exception:
        if self._stalled:
            return self._stalled_error("showed no sign of life")
        lines = self._stderr.lines
        reason = self._stderr.reason()
        full = next((line for line in lines if _NO_SPACE in line or _TOO_LARGE in line), None)
        stdout_failed = any(o.kind is OutputKind.STDOUT and o.label in self.dropped for o in self.outputs) or (
            self._aborted is not None and self._aborted[0].kind is OutputKind.STDOUT)  # fmt: skip
        if stdout_failed and full is not None:  # `-o - > /dev/full`: no folder or disk of avatargen's to advise on
            return PublishError(f"stdout could not take the video ({ffmpeg_reason([full])}); give stdout room or "
                                "redirect it elsewhere")  # fmt: skip
        if full is not None:  # not always the last line: the muxers report the failure after the cause
            return disk_full_error(self._where, ffmpeg_reason([full]))
        if self._proc.returncode == -signal.SIGXFSZ:
            # Over the file-size limit (ulimit -f, RLIMIT_FSIZE), ffmpeg is killed by SIGXFSZ before it can say so.
            return disk_full_error(self._where, "File too large: the file-size limit (ulimit -f) was reached")
        if any(o.kind is OutputKind.STDOUT and o.label in self.dropped for o in self.outputs):
            return PublishError("stdout was closed by the program reading it; the render stopped")
        if self.outputs and all(o.label in self.dropped for o in self.outputs):
            failures = "; ".join(f"{label}: {why}" for label, why in self.dropped.items())
            return PublishError(f"every output failed ({failures}); check that the publish targets are reachable")
        if self._aborted is not None and self._aborted[0].kind is not OutputKind.MP4:  # the file's failures are ffmpeg's or the disk's
            output, why = self._aborted[0], self._aborted[1] or reason
            if output.kind is OutputKind.STDOUT:
                return PublishError(f"stdout was closed by the program reading it ({why}); the render stopped")
            return PublishError(
                f"publish target '{output.label}' failed ({why}); check that it is reachable, or set "
                "output.on_publish_failure=drop to keep rendering without it"
            )
        return FfmpegError(f"ffmpeg {what} writing '{self._where}' ({reason})")

    def __enter__(self) -> Encoder:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is not None:
            self.abort()
        else:
            self.close()


class MuxProgress:
    """How many video frames ffmpeg has muxed, read from its ``-progress`` reports (``frame=N`` lines) on a pipe of
    their own, on a daemon thread; and when a report last said something new (``changed``, monotonic seconds: frames
    muxed, audio encoded, bytes written), ffmpeg's sign of life while it finishes."""

    _MOVING = (b"frame=", b"out_time_us=", b"total_size=", b"progress=")

    def __init__(self, pipe: BinaryIO) -> None:
        self.frames = 0
        self.changed = time.monotonic()
        self._pipe = pipe
        self._thread = threading.Thread(target=self._run, name="ffmpeg-progress", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        seen: dict[bytes, bytes] = {}
        with self._pipe:
            for line in self._pipe:
                key, _, value = line.partition(b"=")
                if line.startswith(self._MOVING) and seen.get(key) != value:
                    seen[key] = value
                    self.changed = time.monotonic()
                if key == b"frame":
                    try:
                        self.frames = int(value)
                    except ValueError:
                        pass

    def join(self, timeout: float = 5.0) -> None:
        self._thread.join(timeout)


class EncoderStalledError(FfmpegError):
    """ffmpeg stopped taking frames (stopped by a signal, hung, blocked on an output nobody reads) for its stall
    limit; it was killed, and the partial MP4 keeps what it had finished. Exit code 1 (130/143 after a stop)."""


class AudioFeed:
    """Writes PCM to one of ffmpeg's input pipes from a thread, so that the caller never blocks on it.

    ffmpeg reads its audio input only as fast as the video lets it mux: a blocking write from the render loop would
    stall generation, which ffmpeg waits on (a deadlock). The queue holds what the audio source is ahead of the video,
    which the pipeline bounds (one chunk and its audio context).
    """

    def __init__(self, pipe: BinaryIO) -> None:
        self._pipe = pipe
        self._queue: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="ffmpeg-audio", daemon=True)
        self._thread.start()

    def put(self, pcm: bytes) -> None:
        self._queue.put(pcm)

    def finish(self) -> None:
        """No more audio: the pipe closes once the queue is written."""
        self._queue.put(None)

    def join(self, timeout: float = 5.0) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            while (pcm := self._queue.get()) is not None:
                self._pipe.write(pcm)
        except (BrokenPipeError, OSError):
            pass  # ffmpeg stopped: the video side reports why
        finally:
            try:
                self._pipe.close()
            except OSError:
                pass


def disk_full_error(path: Path | str, reason: str | None) -> DiskFullError:
    """The one-line error for a full disk or a file-size limit (a ``BadInputError``: exit code 2)."""
    return DiskFullError(
        f"out of disk space or over the file-size limit writing '{path}' ({reason or 'no reason given'}); "
        "free disk space, raise the limit (ulimit -f) or choose another output folder"
    )


def trim_to_frames(path: Path, frames: int, fps: int, part_id: str | None = None) -> None:
    """Cut the tracks of fragmented MP4 ``path`` at ``frames / fps`` seconds by a stream copy, replacing it atomically
    (tagged as the partial of run ``part_id``, as the encoder tagged it)."""
    tmp = path.with_name(f".{path.name}.trim.mp4")
    copy_mp4(["-i", local_file(path), "-map", "0", "-c", "copy", "-t", f"{frames / fps:.6f}", "-movflags", MP4_MOVFLAGS],
             tmp, what=f"trim '{path}'", full_path=path, part_id=part_id)  # fmt: skip
    os.replace(tmp, path)


# The finished file: a plain MP4 with its index (moov) first, so players and tools read its duration from the header
# and seek at once, and the AAC priming cut by an edit list (both streams start at 0).
FINISHED_MOVFLAGS = "+faststart"


def finish_mp4(partial: Path, path: Path, before_publish: Callable[[], None] | None = None) -> None:
    """Remux fragmented ``partial`` into the finished ``path`` (stream copy: the frames keep their exact bits), through
    a hidden temporary file renamed into place once complete (after ``before_publish``); ``partial`` is removed."""
    tmp = path.with_name(f".{path.stem}.joining.mp4")
    copy_mp4(["-i", local_file(partial), "-map", "0", "-c", "copy", "-movflags", FINISHED_MOVFLAGS], tmp,
             what=f"finish '{path}'", full_path=partial)  # fmt: skip
    publish_finished(tmp, path, before_publish)
    partial.unlink(missing_ok=True)


def publish_finished(tmp: Path, path: Path, before_publish: Callable[[], None] | None = None) -> None:
    """Rename the complete ``tmp`` to ``path`` (atomically; a link at ``path`` is replaced, not followed), after
    ``before_publish``; ``tmp`` is removed if that fails."""
    try:
        if before_publish is not None:
            before_publish()
        os.replace(tmp, path)
    except BaseException:
        remove_name(tmp)
        raise


def copy_mp4(args: list[str], tmp: Path, what: str, full_path: Path, part_id: str | None = None) -> None:
    """Run ffmpeg ``args`` writing MP4 ``tmp`` (a fresh file this process creates: never a link's target), tagged as
    avatargen's (and as run ``part_id``'s partial); ``tmp`` is removed on failure (``DiskFullError`` naming
    ``full_path``, else ``FfmpegError``)."""
    fd = create_fresh(tmp)
    try:
        mark = metadata_args(part_id)
        proc = start_ffmpeg(["-v", "error", "-y", *args, *mark, "-f", "mp4", fd_url(fd)], pass_fds=(fd,))
    finally:
        os.close(fd)
    stderr = StderrTail(proc)
    returncode = proc.wait()
    stderr.join()
    if returncode != 0:
        remove_name(tmp)
        reason = stderr.reason()
        if _NO_SPACE in reason or _TOO_LARGE in reason or returncode == -signal.SIGXFSZ:
            raise disk_full_error(full_path, reason)
        raise FfmpegError(f"ffmpeg could not {what} ({reason})")


def _x264_threads() -> list[str]:
    """``-threads 1`` where this process may use ``_X264_ONE_THREAD_CORES`` cores or fewer; else x264's own count."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return ["-threads", "1"] if cores <= _X264_ONE_THREAD_CORES else []


def widen_pipe(fd: int) -> None:
    """Give the pipe at ``fd`` ``FRAME_PIPE_BYTES`` where the system allows (Linux): with the default 64 KiB a
    512x512 frame went over in 12 writes and as many wake-ups of ffmpeg, a 1280x1280 one in 75. Elsewhere, or past
    the user's pipe quota, the pipe stays as it is."""
    try:
        fcntl.fcntl(fd, _F_SETPIPE_SZ, FRAME_PIPE_BYTES)
    except OSError:
        pass
