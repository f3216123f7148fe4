"""--realtime pacing: frames leave on the wall clock, never early; a late frame is an underrun, counted, never hidden."""

from __future__ import annotations

import time

import numpy as np
import pytest

from avatargen.io.pacing import BYTES_PER_SAMPLE, CatchUp, RealtimePacer

FPS = 25


class ClockSink:
    """Records when each frame arrived."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.values: list[int] = []

    def write(self, frames: np.ndarray) -> None:
        for frame in frames:
            self.times.append(time.perf_counter())
            self.values.append(int(frame[0, 0, 0]))


def frames(start: int, count: int) -> np.ndarray:
    return np.arange(start, start + count, dtype=np.uint8)[:, None, None, None].repeat(2, 1).repeat(2, 2).repeat(3, 3)


def test_a_fast_generator_is_paced_to_the_frame_rate():
    sink = ClockSink()
    pacer = RealtimePacer(sink, FPS, buffer_s=0.2)
    began = time.perf_counter()
    for start in range(0, 50, 10):
        pacer.write(frames(start, 10))  # all 2 s of video handed over at once: faster than real time
    pacer.close()
    assert sink.values == list(range(50))  # every frame, in order
    gaps = np.diff(sink.times)
    # Never early: frame k leaves at or after the start buffer plus k frame intervals from when the frames came (a
    # loaded machine may hold a frame up; the ones after it keep their own slots).
    assert (np.array(sink.times) - began >= 0.2 + np.arange(50) / FPS - 0.002).all()
    assert sink.times[-1] - sink.times[0] == pytest.approx(49 / FPS, abs=0.4)  # paced, not all at once (0 s)
    assert np.median(gaps) == pytest.approx(1 / FPS, rel=0.2)
    # Never a burst: a frame held up leaves the next one right behind it, once, not a run of them.
    assert (gaps < 0.1 / FPS).sum() <= 3
    assert pacer.stats.underruns == 0


def test_a_slow_generator_underruns_are_counted():
    sink, seen = ClockSink(), []
    pacer = RealtimePacer(sink, FPS, buffer_s=0.0, on_underrun=seen.append)
    for start in range(0, 12, 4):
        pacer.write(frames(start, 4))
        time.sleep(4 / FPS + 0.15)  # each batch arrives 0.15 s after the previous one ran out
    pacer.close()
    assert sink.values == list(range(12))
    assert pacer.stats.underruns == 2 and seen == [1, 2]
    assert pacer.stats.stall_s == pytest.approx(0.3, abs=0.1)
    # After a stall the clock moves back: the frames of a late batch keep their spacing instead of rushing out.
    assert np.diff(sink.times[4:8]).min() > 0.25 / FPS


def test_a_sink_failure_reaches_the_render():
    class Broken:
        def write(self, frames: np.ndarray) -> None:
            raise OSError("ffmpeg went away")

    pacer = RealtimePacer(Broken(), FPS, buffer_s=0.0)
    with pytest.raises(OSError, match="ffmpeg went away"):
        for start in range(0, 500, 10):  # more than the queue holds: the writer must not block forever
            pacer.write(frames(start % 250, 10))
        pacer.close()


class TimelineSink(ClockSink):
    """Records the order in which video frames and audio bytes reach the encoder."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, int]] = []  # ("audio", total bytes so far) or ("video", frame value)
        self.audio_bytes = 0

    def write(self, frames: np.ndarray) -> None:
        super().write(frames)
        self.events += [("video", int(f[0, 0, 0])) for f in frames]

    def write_audio(self, pcm: bytes) -> None:
        self.audio_bytes += len(pcm)
        self.events.append(("audio", self.audio_bytes))


def test_speech_audio_reaches_the_encoder_ahead_of_its_frame_as_far_as_it_has_arrived():
    """The muxer holds a frame until the audio beside it is in: during speech, each frame's audio goes out as soon
    as it arrives (speech is never dropped), not only once the guard frames after it are in."""
    rate = 48000
    per_frame = rate // FPS * BYTES_PER_SAMPLE
    sink = TimelineSink()
    pacer = RealtimePacer(sink, FPS, buffer_s=0.0, audio_rate=rate, catch_up=CatchUp(target_s=0.3))
    tone = (8000 * np.sin(np.arange(rate // FPS * 3) / 5.0)).astype("<i2")
    pacer.write_audio(np.repeat(tone, 2).tobytes())  # 3 frames of speech: fewer than the 4 guard frames
    pacer.write(frames(0, 1))
    pacer.close()
    first_video = sink.events.index(("video", 0))
    sent_before = max((n for kind, n in sink.events[:first_video] if kind == "audio"), default=0)
    assert sent_before == 3 * per_frame, sink.events
