"""An avatar that speaks what it is given, live: one render session (the model loaded once) fed on the wall clock.

The render reads a pipe as it reads ``--audio -`` in live mode. A feeder thread writes one video frame of audio into
it every frame interval: the next frame of the speech it was given, or silence (the face idles). Each shown frame
comes back (on the pacer's thread) with the given audio that plays with it, unchanged, and the speech segments that
end there. The render runs without catching up (nothing it shows is dropped, so frame k is fed frame k); the feeder
catches up instead: after a stall it leaves out silence it would have fed (never speech) until the picture is back
within ``LAG_S`` of what it was fed.

``clear()`` (barge-in) drops the speech not fed yet and shows, in place of every frame made from audio fed before
it, the last frame shown at rest: the face is idle from the next frame on, and live again once the frames made
after the clear arrive (the live latency, about 0.3-0.5 s on a CPU).
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from avatargen.config.loader import load_config
from avatargen.io.audio_stream import RawPcm
from avatargen.io.sink import SinkContext, SinkPlugin, register_sink
from avatargen.render import RenderRequest, render
from avatargen.render.request import STREAM

_log = logging.getLogger("avatargen.agents")
SCHEME = "avatargen-agent"
LAG_S = 0.6  # the feeder leaves out silence while more than this of what it fed is not shown yet
REST_GUARD_FRAMES = 8  # a frame is at rest when no speech was fed this many frames around it (0.32 s: the
# audio context the model hears on either side, and the mouth closing after a word)
# After a clear, the first frames fed with silence still hear the cleared speech in the audio encoder's context: they
# are shown at rest too (one live chunk's worth; measured: one frame of them opened the mouth).
CLEAR_GUARD_FRAMES = 3
START_TIMEOUT_S = 300.0
_sessions: dict[str, "LiveAvatar"] = {}
_ids = itertools.count()


@dataclass
class ShownFrame:
    """One frame as it is shown: its index, its pixels (H, W, 3) uint8, the given audio that plays with it (s16le
    at the avatar's rate and channels; empty in idle or after a clear) and how many speech segments end with it."""

    index: int
    rgb: np.ndarray
    audio: bytes = b""
    segment_ends: int = 0


@dataclass
class _Fed:
    """What was fed for one frame: its given speech (empty: silence) and the segments that ended with it."""

    audio: bytes = b""
    segment_ends: int = 0


@dataclass
class _Speech:
    """Given audio waiting to be fed, and where segments end in it (byte offsets from its start)."""

    pcm: bytearray = field(default_factory=bytearray)
    ends: deque = field(default_factory=deque)
    taken: int = 0  # bytes fed since the last clear (the offsets in ``ends`` count from here)


class LiveAvatar:
    """``image`` speaking what ``push`` gives it (s16le PCM at ``sample_rate``, ``channels``), live.

    ``start(on_frame)`` loads the model and starts the session; ``on_frame(ShownFrame)`` is then called for every
    frame on the wall clock (on the render's pacing thread: hand it on, do not block). ``end_segment()`` marks the
    end of an utterance (reported with the frame its last sample plays with); ``clear()`` drops what is not shown
    yet; ``close()`` ends the session. ``overrides`` are config overrides (the live defaults are applied first);
    ``warn`` gets the render's warnings (default: the ``avatargen.agents`` logger)."""

    def __init__(self, image: str | Path, *, sample_rate: int = 24000, channels: int = 1,
                 overrides: tuple[str, ...] = (), warn: Callable[[str], None] = _log.warning) -> None:  # fmt: skip
        self.image, self.sample_rate, self.channels = Path(image), sample_rate, channels
        self.overrides, self.warn = tuple(overrides), warn
        self.fps = 0
        self.width = self.height = 0
        self.report: dict | None = None
        self.error: BaseException | None = None
        self._id = f"{os.getpid()}-{next(_ids)}"
        self._lock = threading.Lock()
        self._speech = _Speech()
        self._fed: dict[int, _Fed] = {}  # frame -> what was fed with it, while not shown (speech or segment ends)
        self._fed_frames = 0
        self._shown = 0
        self._speech_fed: deque[int] = deque()  # frames fed with speech, from a few before the one shown next
        self._clear_until = 0  # frames before this were made from audio fed before the last clear
        self._rest: np.ndarray | None = None
        self._on_frame: Callable[[ShownFrame], None] | None = None
        self._opened = threading.Event()
        self._closed = threading.Event()
        self._read_fd, self._write_fd = os.pipe()
        self._render_thread: threading.Thread | None = None
        self._feeder: threading.Thread | None = None

    # -- the session -------------------------------------------------------------------------------------------------

    def start(self, on_frame: Callable[[ShownFrame], None]) -> None:
        """Load the model and start rendering; returns once frames are about to flow (``fps``, ``width``,
        ``height`` known). Raises what stopped the render from starting."""
        self._on_frame = on_frame
        _sessions[self._id] = self
        register_sink(PLUGIN)
        self._render_thread = threading.Thread(target=self._render, name="live-avatar-render", daemon=True)
        self._render_thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._opened.wait(0.1):
            if not self._render_thread.is_alive() or time.monotonic() > deadline:
                self.close()
                raise self.error or RuntimeError("the live avatar's render did not start")
        self._feeder = threading.Thread(target=self._feed, name="live-avatar-feeder", daemon=True)
        self._feeder.start()

    def close(self) -> None:
        """End the session: the feed ends, the render finishes what it was fed and stops. Idempotent."""
        self._closed.set()
        if self._feeder is not None:
            self._feeder.join(5)
        else:
            self._close_pipe()
        if self._render_thread is not None:
            self._render_thread.join(30)
        _sessions.pop(self._id, None)

    def _render(self) -> None:
        config = load_config([*self.overrides, "output.realtime_target_s=0"], live=True)
        config.output.realtime = True
        config.output.publish = [f"{SCHEME}://{self._id}"]
        request = RenderRequest(image=self.image, audio=STREAM, output=None,
                                raw_audio=RawPcm(self.sample_rate, self.channels),
                                stdin=os.fdopen(self._read_fd, "rb", buffering=0))  # fmt: skip
        try:
            self.report = render(request, config, warn=self.warn)
        except BaseException as error:  # noqa: BLE001 - kept for the caller, which raises it
            self.error = error
        finally:
            self._closed.set()

    def _close_pipe(self) -> None:
        try:
            os.close(self._write_fd)
        except OSError:
            pass

    # -- what an agent gives it --------------------------------------------------------------------------------------

    def push(self, pcm: bytes) -> None:
        """Queue speech (s16le, the avatar's rate and channels); it is fed from the next frame on. Never blocks."""
        if self.error is not None:
            raise self.error
        with self._lock:
            self._speech.pcm += pcm

    def end_segment(self) -> None:
        """The utterance pushed so far ends here."""
        with self._lock:
            self._speech.ends.append(self._speech.taken + len(self._speech.pcm))

    def clear(self) -> None:
        """Barge-in: drop the speech not fed yet; every frame made from audio fed before now is shown as the face
        at rest, with no audio, and ends no segment."""
        with self._lock:
            self._speech = _Speech()
            self._clear_until = self._fed_frames + CLEAR_GUARD_FRAMES
            for frame in range(self._shown, self._fed_frames):
                self._fed.pop(frame, None)

    def rest_frame(self) -> np.ndarray | None:
        """The last frame shown at rest (None: none yet)."""
        return self._rest

    # -- the feeder (its own thread) ------------------------------------------------------------------------------

    def _feed(self) -> None:
        frame_bytes = self.sample_rate // self.fps * self.channels * 2
        period = 1.0 / self.fps
        start, tick = time.monotonic(), 0
        try:
            while not self._closed.is_set():
                delay = start + tick * period - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                tick += 1
                with self._lock:
                    piece = self._next_piece(frame_bytes)
                while piece:  # a pipe of 64 KiB (a second or more of audio): the render reads it as it comes
                    piece = piece[os.write(self._write_fd, piece) :]
        except OSError:
            pass  # the render stopped reading: it ended
        finally:
            self._close_pipe()

    def _next_piece(self, frame_bytes: int) -> bytes | None:
        """The audio of the next frame to feed (under the lock): speech, or silence, or None (silence left out)."""
        speech = self._speech
        frame = self._fed_frames
        if not speech.pcm and not speech.ends:
            if (frame - self._shown) / self.fps > LAG_S:
                return None  # behind after a stall: this silence is left out, the picture catches up
            self._fed_frames += 1
            return bytes(frame_bytes)
        # up to the end of the utterance at most: the next one starts with the next frame
        size = min(frame_bytes, speech.ends[0] - speech.taken) if speech.ends else frame_bytes
        given = bytes(speech.pcm[:size])
        del speech.pcm[:size]
        speech.taken += len(given)
        ends = 0
        while speech.ends and speech.ends[0] <= speech.taken:
            speech.ends.popleft()
            ends += 1
        self._fed[frame] = _Fed(given, ends)
        if given:
            self._speech_fed.append(frame)
        self._fed_frames += 1
        return given + bytes(frame_bytes - len(given))

    # -- the sink's side (the pacer's thread) ----------------------------------------------------------------------

    def _opened_with(self, context: SinkContext) -> None:
        self.fps, self.width, self.height = context.fps, context.width, context.height
        self._opened.set()

    def _shown_frame(self, rgb: np.ndarray) -> ShownFrame:
        with self._lock:
            index = self._shown
            self._shown += 1
            fed = self._fed.pop(index, _Fed())
            cleared = index < self._clear_until
            while self._speech_fed and self._speech_fed[0] < index - REST_GUARD_FRAMES:
                self._speech_fed.popleft()
            # no speech fed within a few frames on either side (the model hears a little ahead)
            at_rest = not cleared and not any(f <= index + REST_GUARD_FRAMES for f in self._speech_fed)
        if cleared and self._rest is not None:
            return ShownFrame(index, self._rest)
        if at_rest:
            self._rest = rgb.copy()
        return ShownFrame(index, rgb, fed.audio, fed.segment_ends)


class _AvatarSink:
    """A ``LiveAvatar``'s frames, as the render shows them, to its ``on_frame``."""

    def __init__(self, avatar: LiveAvatar) -> None:
        self.avatar = avatar

    def write(self, frames: np.ndarray) -> None:
        for rgb in frames:
            self.avatar._on_frame(self.avatar._shown_frame(rgb))

    def write_audio(self, pcm: bytes) -> None:
        pass  # the given audio goes out as it was given (LiveAvatar keeps it), not resampled

    def close(self, finished: bool) -> None:
        pass


def _open(context: SinkContext) -> _AvatarSink | None:
    (target,) = context.targets
    avatar = _sessions.get(target.removeprefix(f"{SCHEME}://"))
    if avatar is None:
        return None
    avatar._opened_with(context)
    return _AvatarSink(avatar)


PLUGIN = SinkPlugin(open=_open, schemes=(SCHEME,))
