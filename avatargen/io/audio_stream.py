"""Audio in from a pipe (``--audio -``): WAV, or raw PCM of a given rate and channel count, decoded as it arrives.

One ffmpeg decodes stdin into two streams at once: float32 mono at the model's rate for the pipeline (read block by
block, like ``AudioFileSource``), and 48 kHz stereo s16le for the encoder's audio track, handed to
``encoder_audio`` from a reader thread. The pipeline pulls the model stream only as fast as it renders, which holds
ffmpeg, and so the reading of stdin, back: memory stays constant however long the session runs.

Stdin reaches ffmpeg through a thread of ours (``StdinReader``), never directly: a producer that stalls would
otherwise hold the render for as long as it stalls, whatever signal comes. ``end_input()`` (a stop request) ends the
stream there: ffmpeg decodes what it was given, and the render makes the video of all of it.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from avatargen.errors import BadInputError
from avatargen.io.audio import model_audio_args, read_blocks, stop_decoder
from avatargen.io.catch_up import InputGate, RawFilter
from avatargen.io.ffmpeg import start_ffmpeg
from avatargen.io.encoder import ENCODER_AUDIO_RATE

_FIX = "pipe WAV into --audio -, or raw s16le PCM with --audio-rate and --audio-channels"
_ENCODER_READ_BYTES = 19200  # 0.1 s of 48 kHz stereo s16le


@dataclass(frozen=True)
class RawPcm:
    """Raw signed 16-bit little-endian PCM: its sample rate and channel count (a WAV header says them itself)."""

    rate: int
    channels: int


_WAV_FORMATS = {(1, 8): "u8", (1, 16): "s16le", (1, 24): "s24le", (1, 32): "s32le", (3, 32): "f32le", (3, 64): "f64le"}


class StdinReader:
    """Reads a descriptor (stdin) unbuffered, with a way out: after ``interrupt()`` (safe to call from a signal
    handler or another thread) every read returns b"", as at the end of the stream, even one already waiting."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.interrupted = False
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_write, False)

    def read(self, size: int) -> bytes:
        """Up to ``size`` bytes as they arrive; b"" at the end of the stream or once interrupted."""
        poller = select.poll()
        poller.register(self.fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        poller.register(self._wake_read, select.POLLIN)
        while not self.interrupted:
            events = dict(poller.poll())
            if self._wake_read in events or self.interrupted:
                break
            if events.get(self.fd):
                return os.read(self.fd, size)
        return b""

    def read_exactly(self, size: int) -> bytes:
        """``size`` bytes (a pipe returns what has arrived: read until there are enough); fewer at the end."""
        data = b""
        while len(data) < size:
            chunk = self.read(size - len(data))
            if not chunk:
                break
            data += chunk
        return data

    def interrupt(self) -> None:
        self.interrupted = True
        try:
            os.write(self._wake_write, b"x")
        except (BlockingIOError, OSError):
            pass  # already woken, or closed


def read_wav_header(reader: StdinReader) -> tuple[str, int, int]:
    """Read a WAV header up to the first sample; returns (ffmpeg raw format, sample rate, channels).

    Exactly the header's bytes are read (unbuffered), so whoever reads next starts at the first sample. The
    length fields are ignored: a stream is read until it ends (recorders write 0 or 0xFFFFFFFF there).
    """
    riff = reader.read_exactly(12)
    if len(riff) < 12 or riff[:4] != b"RIFF" or riff[8:12] != b"WAVE":
        got = "nothing" if not riff else "no WAV header"
        raise BadInputError(f"audio from stdin: {got} on stdin; {_FIX}")
    fmt: tuple[int, int, int, int] | None = None
    while True:
        chunk = reader.read_exactly(8)
        if len(chunk) < 8:
            raise BadInputError(f"audio from stdin: the WAV header ends before its data; {_FIX}")
        kind, size = chunk[:4], int.from_bytes(chunk[4:], "little")
        if kind == b"data":
            break
        body = reader.read_exactly(size + size % 2)  # chunks are word-aligned
        if kind == b"fmt " and len(body) >= 16:
            tag, channels, rate = int.from_bytes(body[0:2], "little"), int.from_bytes(body[2:4], "little"), int.from_bytes(body[4:8], "little")
            bits = int.from_bytes(body[14:16], "little")
            if tag == 0xFFFE and len(body) >= 26:  # WAVE_FORMAT_EXTENSIBLE: the real tag opens the sub-format GUID
                tag = int.from_bytes(body[24:26], "little")
            fmt = (tag, bits, rate, channels)
    if fmt is None:
        raise BadInputError(f"audio from stdin: the WAV header has no 'fmt ' chunk; {_FIX}")
    tag, bits, rate, channels = fmt
    if (tag, bits) not in _WAV_FORMATS or rate <= 0 or channels <= 0:
        raise BadInputError(
            f"audio from stdin: WAV format {tag} with {bits}-bit samples is not supported; send PCM (8/16/24/32-bit) "
            "or float WAV, or raw s16le PCM with --audio-rate and --audio-channels"
        )
    return _WAV_FORMATS[(tag, bits)], rate, channels


class AudioStreamSource:
    """Streams audio from ``stream`` (stdin by default) as float32 mono blocks of ``block_samples``; one pass only.

    ``raw`` None reads a WAV stream (PCM or float, any rate and channel count); otherwise raw s16le PCM.
    ``encoder_audio`` (set before iterating) receives the same audio as 48 kHz stereo s16le bytes for the video's
    audio track. ``duration_hint`` is None: a stream's length is known only when it ends.
    """

    duration_hint: float | None = None
    damage: str | None = None  # what the decoder skipped, once the stream has ended (see ``AudioFileSource``)

    def __init__(
        self, sample_rate: int, block_samples: int, raw: RawPcm | None = None, stream: BinaryIO | None = None
    ) -> None:
        if sample_rate <= 0 or block_samples <= 0:
            raise ValueError(f"sample_rate and block_samples must be positive, got {sample_rate} and {block_samples}")
        if raw is not None and (raw.rate <= 0 or raw.channels <= 0):
            raise BadInputError(f"--audio-rate and --audio-channels must be positive, got {raw.rate} and {raw.channels}")
        if stream is None and sys.stdin is None:  # the process started with descriptor 0 closed (`<&-`)
            raise BadInputError(f"--audio - reads audio from stdin, but stdin is closed; {_FIX}")
        self.stream = stream if stream is not None else sys.stdin.buffer
        if self.stream.isatty():
            raise BadInputError(f"--audio - reads audio from stdin, but stdin is a terminal; {_FIX}")
        self.sample_rate = int(sample_rate)
        self.block_samples = int(block_samples)
        self.raw = raw
        self.encoder_audio: Callable[[bytes], None] | None = None
        self._proc: subprocess.Popen | None = None
        self._blocks: Iterator[np.ndarray] | None = None
        self._started = False
        self._reader = StdinReader(self.stream.fileno())
        self.gate: InputGate | None = None  # set before iterating: silent input left out while far behind (live)

    def end_input(self) -> None:
        """End the stream here (a stop request; safe from a signal handler): what has arrived is decoded and comes
        out, then the iteration ends, as when the producer closes the pipe."""
        self._reader.interrupt()

    def __iter__(self) -> Iterator[np.ndarray]:
        if self._started:
            raise RuntimeError("an audio stream can be read only once")
        self._started = True
        self._blocks = self._decode()
        return self._blocks

    def _decode(self) -> Iterator[np.ndarray]:
        # The WAV header is read here, not by ffmpeg: ffmpeg's WAV demuxer on a pipe holds its output until the stream
        # ends (measured: 2 s of real-time audio came out only at EOF), raw PCM flows at once. So ffmpeg gets raw PCM.
        sample_format, rate, channels = (
            ("s16le", self.raw.rate, self.raw.channels) if self.raw is not None else read_wav_header(self._reader)
        )
        source = ["-f", sample_format, "-ar", str(rate), "-ac", str(channels)]
        outputs = model_audio_args(self.sample_rate)
        pass_fds: tuple[int, ...] = ()
        read_fd = -1
        if self.encoder_audio is not None:
            read_fd, write_fd = os.pipe()
            pass_fds = (write_fd,)
            outputs += ["-map", "0:a:0", "-vn", "-ac", "2", "-ar", str(ENCODER_AUDIO_RATE), "-f", "s16le",
                        "-flush_packets", "1", f"pipe:{write_fd}"]  # fmt: skip
        proc = start_ffmpeg(
            ["-v", "error", *source, "-i", "pipe:0", *outputs],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, pass_fds=pass_fds,
        )  # fmt: skip
        for fd in pass_fds:
            os.close(fd)  # ffmpeg holds the write end; ours would hide the end of the stream from the reader
        self._proc = proc
        keep = RawFilter(self.gate, sample_format, rate, channels) if self.gate is not None else None
        threading.Thread(target=self._pass_stdin, args=(proc.stdin, keep), name="stdin-to-ffmpeg", daemon=True).start()
        reader = None
        if read_fd >= 0:
            reader = threading.Thread(target=self._forward, args=(os.fdopen(read_fd, "rb", buffering=0),), daemon=True)
            reader.start()
        try:
            decoded = yield from read_blocks(proc, self.block_samples, self.sample_rate, "audio from stdin", _FIX, live=True)
            self.damage = decoded.damage
            if reader is not None:
                reader.join(timeout=5.0)  # the encoder gets the audio's last samples before the video ends
        finally:
            stop_decoder(proc)
            if self._proc is proc:
                self._proc = None

    def _pass_stdin(self, pipe: BinaryIO, keep: RawFilter | None) -> None:
        """Hand stdin to ffmpeg as it arrives (what ``keep`` passes, with a gate); at its end, or on
        ``end_input()``, close ffmpeg's input."""
        try:
            while chunk := self._reader.read(65536):
                if keep is not None:
                    chunk = keep(chunk)
                if chunk:
                    pipe.write(chunk)
                    pipe.flush()
            if keep is not None and (rest := keep.flush()):
                pipe.write(rest)
        except (BrokenPipeError, OSError):
            pass  # ffmpeg stopped: its exit status says why
        finally:
            try:
                pipe.close()
            except OSError:
                pass

    def _forward(self, pipe: BinaryIO) -> None:
        """Hand the encoder's copy of the audio on as it comes (the encoder queues it: this never blocks long)."""
        with pipe:
            while chunk := pipe.read(_ENCODER_READ_BYTES):
                self.encoder_audio(chunk)

    def close(self) -> None:
        """Stop the decoder (the iterator then ends)."""
        self._reader.interrupt()
        if self._proc is not None:
            stop_decoder(self._proc)
        if self._blocks is not None:
            self._blocks.close()
            self._blocks = None

    def __enter__(self) -> AudioStreamSource:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
