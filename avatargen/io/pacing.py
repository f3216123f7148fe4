"""Real-time pacing (``--realtime``): frames leave for the encoder on the wall clock, at the video's frame rate.

With a live audio stream (``--audio -``) the pacer also carries the audio track: each frame leaves with its own
audio, so it can catch up. After a stall or a late start, frames whose audio is silence (and that of a few frames on
either side) are dropped, with their audio, until the delay from the voice to the picture is back under a target:
the silence gets shorter, speech is never cut, and picture and sound stay in step.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from avatargen.io.sink import FrameSink

_DONE = None
BYTES_PER_SAMPLE = 4  # the encoder's audio track: stereo s16le
# The encoder gets a frame's audio this many frames before the frame: its muxer reads the input that is behind, so
# audio sent only with its frame would hold the video back (AAC's 1024-sample delay is about a frame and a half).
AUDIO_LEAD_FRAMES = 8


@dataclass(frozen=True)
class CatchUp:
    """When the pacer may drop a frame: its output would be more than ``target_s`` after its audio arrived, and the
    audio of this frame and of ``guard_frames`` frames on each side is quieter than ``silence_dbfs`` (so the mouth is
    at rest: a closing mouth after a word is kept). The decision is made when the frame's audio goes out, a few
    frames before the frame is due (``AUDIO_LEAD_FRAMES``)."""

    target_s: float
    silence_dbfs: float = -40.0
    guard_frames: int = 4


@dataclass
class PacingStats:
    """What pacing saw. An underrun is a frame that was not ready when it was due: viewers saw the video stall.
    A dropped frame is a silent one the pacer left out to catch up (with its audio)."""

    buffer_s: float
    underruns: int = 0
    stall_s: float = 0.0  # total time the output waited for late frames
    max_lead_s: float = 0.0  # how far generation got ahead of the clock (bounded by the queue)
    dropped: int = 0  # silent frames left out to catch up
    dropped_s: float = 0.0
    # Live audio: per frame, seconds from its audio's arrival to the frame reaching the pacer (the last 1500 frames).
    ready_lag_s: deque = field(default_factory=lambda: deque(maxlen=1500))

    def as_dict(self) -> dict[str, float | int]:
        result = {"buffer_s": self.buffer_s, "underruns": self.underruns, "stall_s": round(self.stall_s, 3),
                  "max_lead_s": round(self.max_lead_s, 3), "dropped": self.dropped,
                  "dropped_s": round(self.dropped_s, 3)}  # fmt: skip
        if self.ready_lag_s:  # its spread (p95 - p50) is the jitter the output buffer absorbs
            lags = np.asarray(self.ready_lag_s)
            result.update(ready_lag_p50_s=round(float(np.median(lags)), 3),
                          ready_lag_p95_s=round(float(np.percentile(lags, 95)), 3))  # fmt: skip
        return result


class _AudioTrack:
    """The live audio as it arrives (48 kHz stereo s16le bytes), cut into video frames: when each frame's audio
    arrived, whether it is silence, and which frames' audio goes out (the frame left) or not (it was dropped)."""

    def __init__(self, fps: int, rate: int, silence_dbfs: float) -> None:
        self.fps, self.rate = fps, rate
        self.silence = 32768.0 * 10 ** (silence_dbfs / 20)  # RMS in s16 units
        self.lock = threading.Lock()
        self.received = 0  # bytes so far
        self.arrivals: deque[tuple[int, float]] = deque()  # (bytes received, when), one per piece
        self.levels: dict[int, bool] = {}  # frame -> its audio is silence
        self._pending = bytearray()  # received, not yet sent nor dropped; starts at byte ``_pending_start``
        self._pending_start = 0
        self._plan: deque[tuple[int, bool]] = deque()  # (up to byte, send) decided for the frames that left
        self._measured = 0  # frames whose level is known
        self._unmeasured = bytearray()  # the bytes from frame ``_measured`` on

    def offset(self, frame: int) -> int:
        """The byte where frame ``frame``'s audio starts."""
        return frame * self.rate // self.fps * BYTES_PER_SAMPLE

    def add(self, pcm: bytes, now: float) -> None:
        with self.lock:
            self.received += len(pcm)
            self.arrivals.append((self.received, now))
            self._pending += pcm
            self._unmeasured += pcm
            while (size := self.offset(self._measured + 1) - self.offset(self._measured)) <= len(self._unmeasured):
                samples = np.frombuffer(bytes(self._unmeasured[:size]), dtype="<i2").astype(np.float32)
                del self._unmeasured[:size]
                self.levels[self._measured] = float(np.sqrt(np.mean(samples**2))) < self.silence
                self._measured += 1

    def arrived(self, frame: int) -> float | None:
        """When the first byte of frame ``frame``'s audio arrived (None: not yet)."""
        start = self.offset(frame)
        with self.lock:
            while len(self.arrivals) > 1 and self.arrivals[0][0] <= start:
                self.arrivals.popleft()  # frames only move forward
            for end, when in self.arrivals:
                if end > start:
                    return when
        return None

    def has_level(self, frame: int) -> bool:
        """Frame ``frame``'s audio has all arrived (its level is known)."""
        with self.lock:
            return frame < self._measured

    def speech_near(self, first: int, last: int) -> bool:
        """One of frames first..last whose audio has arrived is louder than silence."""
        with self.lock:
            return any(self.levels.get(k) is False for k in range(max(first, 0), last + 1))

    def silent(self, first: int, last: int) -> bool:
        """Frames first..last (inclusive) are all silence (False while one of them has not arrived)."""
        with self.lock:
            return all(self.levels.get(k, False) if k >= 0 else True for k in range(first, last + 1))

    def decide(self, frame: int, send: bool) -> None:
        """Frame ``frame`` left (``send``) or was dropped: its audio goes out, or not, as it arrives."""
        with self.lock:
            self._plan.append((self.offset(frame + 1), send))
            self.levels.pop(frame - 64, None)  # only the frames around the clock are asked about

    def finish(self) -> None:
        """No more frames: the rest of the audio (its tail after the last frame) goes out."""
        with self.lock:
            self._plan.append((math.inf, True))

    def take(self) -> bytes:
        """The bytes decided for so far that have arrived and are to be sent, in order."""
        out = bytearray()
        with self.lock:
            while self._plan:
                until, send = self._plan[0]
                end = min(until, self.received)
                count = end - self._pending_start
                if count > 0:
                    if send:
                        out += self._pending[:count]
                    del self._pending[:count]
                    self._pending_start = end
                if end < until:
                    break
                self._plan.popleft()
        return bytes(out)


class RealtimePacer:
    """A FrameSink that hands frames to ``sink`` at ``fps`` on the wall clock, from a thread of its own.

    Frame k is due ``buffer_s + k / fps`` after the first frame arrived; the generator never waits for the clock (it
    only blocks when it is ``queue_s`` ahead, which bounds memory). When a frame arrives after its due time (by more
    than one frame period) it is an underrun: counted, its lateness added to ``stall_s``, and the clock moves back by
    that much, so the frames after it keep their spacing instead of rushing out to catch up.
    ``on_underrun(count)`` is called (on the pacing thread) at each one.

    ``on_position(seconds)``: the stream time the output has reached, after each frame (shown or dropped).
    With ``audio_rate`` the audio track goes through the pacer too (``write_audio``: stereo s16le at that rate, as
    it arrives), each frame's audio to ``sink.write_audio`` when the frame leaves. ``catch_up`` then drops silent
    frames while the output is late (``CatchUp``), and the clock moves forward by each. Without it nothing is dropped.
    """

    def __init__(self, sink: FrameSink, fps: int, buffer_s: float = 1.0, queue_s: float = 2.0, on_underrun=None,
                 audio_rate: int | None = None, catch_up: CatchUp | None = None, on_position=None):  # fmt: skip
        if catch_up is not None and audio_rate is None:
            raise ValueError("catch_up needs the audio track (audio_rate): only audio says which frames are silent")
        self.sink = sink
        self.fps = fps
        self.stats = PacingStats(buffer_s=buffer_s)
        self.catch_up = catch_up
        self._on_underrun = on_underrun
        self._on_position = on_position  # called with the stream seconds the output has reached (shown or dropped)
        self._audio = _AudioTrack(fps, audio_rate, catch_up.silence_dbfs if catch_up else -40.0) if audio_rate else None
        self._queue: queue.Queue[tuple[np.ndarray, float] | None] = queue.Queue(maxsize=max(1, round((buffer_s + queue_s) * fps)))
        self._error: BaseException | None = None
        self._hurry = False  # set when stopping early: what is queued goes out at once
        self._decided = 0  # frames before this have their fate (and their audio's) decided
        self._drops: set[int] = set()  # frames decided to be dropped, not yet reached
        self._thread = threading.Thread(target=self._run, name="realtime-pacer", daemon=True)
        self._thread.start()

    def write(self, frames: np.ndarray) -> None:
        """Queue uint8 frames (T, H, W, 3); blocks only while ``queue_s`` of frames wait. Re-raises a sink failure."""
        for frame in frames:
            self._raise_failure()
            ready = time.perf_counter()
            while True:
                try:
                    self._queue.put((frame, ready), timeout=0.1)
                    break
                except queue.Full:
                    self._raise_failure()

    def write_audio(self, pcm: bytes) -> None:
        """The live audio track as it arrives (never blocks): it leaves frame by frame with the video."""
        if self._audio is None:
            raise RuntimeError("RealtimePacer was not given the audio track (audio_rate)")
        self._audio.add(pcm, time.perf_counter())

    def close(self, hurry: bool = False) -> None:
        """Wait until every queued frame went out (paced, or at once with ``hurry``); re-raises a sink failure."""
        self._hurry = self._hurry or hurry
        while self._thread.is_alive():
            try:
                self._queue.put(_DONE, timeout=0.1)
                break
            except queue.Full:
                continue
        self._thread.join()
        if self._audio is not None and self._error is None:
            self._audio.finish()
            self._send_audio()
        self._raise_failure()

    def discard(self) -> None:
        """Stop at once, dropping queued frames (the render failed; the sink is being aborted). Idempotent."""
        self._hurry = True
        while self._thread.is_alive():
            try:
                self._queue.get_nowait()
            except queue.Empty:
                pass
            try:
                self._queue.put_nowait(_DONE)
            except queue.Full:
                pass
            self._thread.join(timeout=0.1)

    def _raise_failure(self) -> None:
        if self._error is not None:
            raise self._error

    def _send_audio(self) -> None:
        pcm = self._audio.take()
        if pcm:
            self.sink.write_audio(pcm)

    def _plan_audio(self, index: int, clock: float) -> None:
        """Decide the fate of the frames from ``index`` to ``index + AUDIO_LEAD_FRAMES`` whose audio has arrived
        (kept, or dropped to catch up), and send the kept ones' audio: the encoder gets each frame's audio a little
        before the frame, as its muxer needs. ``clock`` is when frame ``index`` is (or was) due."""
        audio, catch_up, period = self._audio, self.catch_up, 1.0 / self.fps
        guard = catch_up.guard_frames if catch_up is not None else 0
        frame = max(self._decided, index)
        while frame <= index + AUDIO_LEAD_FRAMES and audio.has_level(frame):
            drops_before = sum(1 for k in self._drops if index <= k < frame)
            shown_at = clock + (frame - index - drops_before) * period
            drop = False
            if catch_up is not None and not self._hurry and frame > 0:
                arrived = audio.arrived(frame)
                late = arrived is not None and shown_at - arrived > catch_up.target_s
                if late and not audio.speech_near(frame - guard, frame + guard):
                    # Silence so far: whether it may go waits for the audio after it. A frame that is on time or
                    # has speech near is kept, decided now: its audio goes out as far ahead as it has arrived.
                    if not audio.has_level(frame + guard):
                        break
                    drop = audio.silent(frame - guard, frame + guard)
            audio.decide(frame, send=not drop)
            if drop:
                self._drops.add(frame)
            frame += 1
            self._decided = frame
        self._send_audio()

    def _run(self) -> None:
        start: float | None = None
        shift = 0.0  # the clock's delay after underruns, less the frames dropped
        index = 0
        period = 1.0 / self.fps
        try:
            while (item := self._queue.get()) is not _DONE:
                frame, ready = item
                now = time.perf_counter()
                if start is None:
                    start = now + self.stats.buffer_s
                due = start + shift + index * period
                if self._audio is not None:
                    if (arrived := self._audio.arrived(index)) is not None:
                        self.stats.ready_lag_s.append(ready - arrived)
                    self._plan_audio(index, max(now, due))
                    if index in self._drops:  # decided when its audio went out: left out, the next takes its place
                        self._drops.discard(index)
                        self.stats.dropped += 1
                        self.stats.dropped_s += period
                        shift -= period
                        index += 1
                        if self._on_position is not None:
                            self._on_position(index * period)
                        continue
                    if index >= self._decided:  # its level is not known yet: it is kept (its audio sent as it comes)
                        self._audio.decide(index, send=True)
                        self._decided = index + 1
                        self._send_audio()  # before the frame: ffmpeg reads no more video while its audio is behind
                if now < due:
                    self.stats.max_lead_s = max(self.stats.max_lead_s, due - now + self._queue.qsize() * period)
                    if not self._hurry:
                        time.sleep(due - now)
                elif now - due > period and index > 0:
                    self.stats.underruns += 1
                    self.stats.stall_s += now - due
                    shift += now - due
                    if self._on_underrun is not None:
                        self._on_underrun(self.stats.underruns)
                self.sink.write(frame[None])
                index += 1
                if self._on_position is not None:
                    self._on_position(index * period)
        except BaseException as error:  # noqa: BLE001 - handed to the render thread, which raises it
            self._error = error
            while True:  # unblock a writer waiting on a full queue
                try:
                    self._queue.get_nowait()
                except queue.Empty:
                    break
