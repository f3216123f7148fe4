"""A render stopped early never waits for the encoder to encode the rest of the audio, the encoder never outlives
its render, and the output's lock is free only once the encoder is gone."""

from __future__ import annotations

import os
import struct
import subprocess
from pathlib import Path

import imageio_ffmpeg
import numpy as np
import pytest

from avatargen.io.encoder import Encoder
from avatargen.io.mp4_join import join_parts
from avatargen.io.output_lock import OutputLock, is_locked
from tests.conftest import write_speechlike_wav
from tests.ffmpeg_probe import probe, stream_start_times

SIZE = 64


def write_hours_long_wav(path: Path) -> Path:
    """A 53 kB WAV that holds 14.7 hours of audio: 8-bit samples at 1 Hz (ffmpeg resamples it like any other)."""
    samples = np.random.default_rng(0).integers(100, 156, 53_000).astype(np.uint8).tobytes()
    header = b"RIFF" + struct.pack("<I", 36 + len(samples)) + b"WAVE"
    header += b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, 1, 1, 1, 8) + b"data" + struct.pack("<I", len(samples))
    path.write_bytes(header + samples)
    return path


def write_half_hour_flac(path: Path) -> Path:
    """30 minutes of a tone (a few hundred kB of FLAC)."""
    subprocess.run([imageio_ffmpeg.get_ffmpeg_exe(), "-v", "error", "-f", "lavfi", "-i", "sine=f=220:d=1800:r=8000",
                    "-ac", "1", str(path)], check=True)  # fmt: skip
    return path


def _frames(count: int, start: int = 0) -> np.ndarray:
    """(count, SIZE, SIZE, 3) uint8 frames, each a different grey."""
    return np.stack([np.full((SIZE, SIZE, 3), (start + i) * 7 % 256, np.uint8) for i in range(count)])


@pytest.mark.parametrize("make_audio", [write_hours_long_wav, write_half_hour_flac], ids=["hours-long wav", "30-min flac"])
def test_a_partial_closed_early_does_not_encode_the_rest_of_the_audio(tmp_path, make_audio):
    audio = make_audio(tmp_path / f"long{'.wav' if make_audio is write_hours_long_wav else '.flac'}")
    encoder = Encoder(tmp_path / "o.mp4", SIZE, SIZE, 25, audio)
    encoder.write(_frames(30))
    partial = encoder.close_partial(trim=False)  # untrimmed: what ffmpeg itself wrote
    info = probe(partial)
    assert info["frames"] == 30
    # ffmpeg reads the audio ahead of the video (up to ~30 s here), never to its end
    assert info["audio_duration_s"] < 120, "the encoder went on with the rest of the audio"
    encoder = Encoder(tmp_path / "t.mp4", SIZE, SIZE, 25, audio)
    encoder.write(_frames(30))
    info = probe(encoder.close_partial())  # trimmed, as a stopped render leaves it
    assert info["frames"] == 30 and abs(info["audio_duration_s"] - 1.2) <= 1 / 25


def test_a_write_to_a_stopped_encoder_gives_up_within_its_bound_once_a_stop_is_asked(tmp_path):
    """ffmpeg SIGSTOPped: a write used to block for as long as it stayed stopped, and closing the encoder after it
    too (the buffered frame was flushed into the full pipe first)."""
    import signal
    import time

    from avatargen.io.encoder import STALL_AFTER_STOP_S, EncoderStalledError

    encoder = Encoder(tmp_path / "o.mp4", SIZE, SIZE, 25, write_speechlike_wav(tmp_path / "a.wav", 4.0))
    encoder.write(_frames(25))
    os.kill(encoder._proc.pid, signal.SIGSTOP)
    encoder.hurry()  # what a SIGINT to the render does
    started = time.monotonic()
    with pytest.raises(EncoderStalledError, match="took no frame for 5 s"):
        for _ in range(100):  # 1.2 MB: far more than the pipe holds
            encoder.write(_frames(1))
    assert STALL_AFTER_STOP_S - 0.5 <= time.monotonic() - started <= STALL_AFTER_STOP_S + 3
    started = time.monotonic()
    partial = encoder.abort(trim=True)
    assert time.monotonic() - started <= 3 and encoder._proc.returncode == -signal.SIGKILL
    assert probe(partial)["frames"] <= encoder.frames_written  # what it finished before it was stopped stays playable


def test_the_encoder_holds_the_output_lock_while_it_lives(tmp_path):
    out = tmp_path / "o.mp4"
    lock = OutputLock(out)
    lock.acquire()
    encoder = Encoder(out, SIZE, SIZE, 25, write_speechlike_wav(tmp_path / "a.wav", 1.0), hold_fds=(lock.fileno(),))
    encoder.write(_frames(5))
    os.close(lock.fileno())  # what the kernel does to a render killed by SIGKILL: its descriptors close
    lock._fd = None
    assert is_locked(out), "the output is free while its encoder still writes it"
    encoder.abort()
    assert not is_locked(out)


def test_a_joined_video_starts_at_zero_and_decodes_frame_for_frame(tmp_path):
    audio = write_speechlike_wav(tmp_path / "a.wav", 2.0)
    parts = []
    for number, (start, count) in enumerate([(0, 25), (25, 25)]):
        encoder = Encoder(tmp_path / f"p{number}.mp4", SIZE, SIZE, 25, audio, start_frame=start)
        encoder.write(_frames(count, start))
        parts.append((encoder.close_partial(), count))
    joined = tmp_path / "joined.mp4"
    join_parts(parts, audio, joined, 25)
    assert stream_start_times(joined)["video"] == 0.0
    # decoded as a player does (no passthrough timing): no frame doubled or dropped
    raw = subprocess.run([imageio_ffmpeg.get_ffmpeg_exe(), "-v", "error", "-i", str(joined), "-map", "0:v:0",
                          "-f", "rawvideo", "-pix_fmt", "gray", "pipe:1"], capture_output=True, check=True).stdout  # fmt: skip
    greys = np.frombuffer(raw, np.uint8).reshape(-1, SIZE * SIZE).mean(axis=1)
    assert len(greys) == 50
    assert np.abs(greys - _frames(50)[:, 0, 0, 0]).max() <= 3
