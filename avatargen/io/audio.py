"""Audio in: any file ffmpeg reads, decoded to float32 mono at the model's sample rate, streamed in blocks."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from avatargen.errors import BadInputError
from avatargen.io.ffmpeg import StderrTail, read_input_info, start_ffmpeg

_FIX = "give a wav/flac/mp3/ogg/m4a file"
_BYTES_PER_SAMPLE = 4  # f32le


class AudioFileSource:
    """Streams an audio file as float32 mono blocks of ``block_samples`` (the last one may be shorter).

    The file is checked when the source is built, so a bad file fails before any rendering starts. Iterating starts
    an ffmpeg decoder (``-vn -ac 1 -ar SR -f f32le pipe:1``, channels averaged) and reads its stdout block by block,
    so memory stays constant however long the file is. Each iteration decodes from the start. ``duration_hint`` is
    the container's duration in seconds for progress bars only (None when the container does not say); the decoded
    sample count is what counts.

    Errors (all ``BadInputError``): missing/unreadable file, a file ffmpeg cannot open or without an audio stream,
    a file that decodes to no samples, a decode error midway (ffmpeg runs with ``-xerror``, so a truncated wav/flac
    fails instead of silently ending early). Use as a context manager or call ``close()`` to stop the decoder.
    """

    def __init__(self, path: str | Path, sample_rate: int, block_samples: int = 16000) -> None:
        if sample_rate <= 0 or block_samples <= 0:
            raise ValueError(f"sample_rate and block_samples must be positive, got {sample_rate} and {block_samples}")
        self.path = Path(path)
        self.sample_rate = int(sample_rate)
        self.block_samples = int(block_samples)
        self._proc: subprocess.Popen | None = None
        self._blocks: Iterator[np.ndarray] | None = None

        if not self.path.exists():
            raise BadInputError(f"audio file '{self.path}' does not exist; check the path")
        if not self.path.is_file():
            raise BadInputError(f"audio path '{self.path}' is not a file; {_FIX}")
        if not os.access(self.path, os.R_OK):
            raise BadInputError(f"audio file '{self.path}' is not readable; fix its permissions")
        info = read_input_info(self.path)
        if info.error is not None:
            raise BadInputError(f"audio file '{self.path}' could not be decoded by ffmpeg ({info.error}); {_FIX}")
        if "Audio" not in info.stream_kinds:
            raise BadInputError(f"file '{self.path}' has no audio stream; {_FIX}")
        self.duration_hint: float | None = info.duration_s

    def __iter__(self) -> Iterator[np.ndarray]:
        self.close()  # a new iteration restarts decoding; never leave the previous decoder running
        self._blocks = self._decode()
        return self._blocks

    def _decode(self) -> Iterator[np.ndarray]:
        proc = start_ffmpeg(
            ["-v", "error", "-xerror", "-i", str(self.path), *model_audio_args(self.sample_rate)], stdout=subprocess.PIPE
        )
        self._proc = proc
        try:
            yield from read_blocks(proc, self.block_samples, self.sample_rate, f"audio file '{self.path}'", f"re-encode it or {_FIX}")
        finally:
            stop_decoder(proc)
            if self._proc is proc:
                self._proc = None

    def close(self) -> None:
        """Stop the decoder of the current iteration, if any (the iterator then ends)."""
        if self._proc is not None:
            stop_decoder(self._proc)  # unblocks a reader stuck in read()
        if self._blocks is not None:
            self._blocks.close()  # runs the generator's cleanup now rather than at garbage collection
            self._blocks = None

    def __enter__(self) -> AudioFileSource:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def model_audio_args(sample_rate: int) -> list[str]:
    """ffmpeg output arguments: the first audio stream as float32 mono at ``sample_rate`` on stdout."""
    # ffmpeg's default downmix sums stereo at -3 dB each (loud stereo then clips past 1.0); average instead.
    return ["-map", "0:a:0", "-vn", "-ac", "1", "-ar", str(sample_rate), "-af", "aresample=rematrix_maxval=1.0",
            "-f", "f32le", "-flush_packets", "1", "pipe:1"]  # fmt: skip


def read_blocks(
    proc: subprocess.Popen, block_samples: int, sample_rate: int, what: str, fix: str, live: bool = False
) -> Iterator[np.ndarray]:
    """Read ffmpeg's float32 stdout in blocks of ``block_samples``; BadInputError if decoding fails or finds nothing.

    ``live`` (a stream arriving in real time) yields whatever has arrived, up to a block, instead of waiting for a
    whole one: the pipeline then starts a chunk as soon as its audio is there, not up to a block later.
    """
    stderr = StderrTail(proc)
    block_bytes = block_samples * _BYTES_PER_SAMPLE
    total = 0
    pending = b""  # a sample split across two reads
    while True:
        # read() blocks until a full block or EOF; read1() returns what one read of the pipe gives (b"" at EOF).
        chunk = proc.stdout.read1(block_bytes) if live else proc.stdout.read(block_bytes)
        data = pending + chunk
        usable = len(data) - len(data) % _BYTES_PER_SAMPLE
        pending = data[usable:]
        if usable:
            total += usable // _BYTES_PER_SAMPLE
            yield np.frombuffer(data[:usable], dtype="<f4").astype(np.float32)
        if not chunk if live else len(chunk) < block_bytes:  # end of stream
            break
    returncode = proc.wait()
    stderr.join()
    if returncode != 0:
        raise BadInputError(f"{what} failed to decode after {total / sample_rate:.2f}s ({stderr.reason()}); {fix}")
    if total == 0:
        raise BadInputError(f"{what} contains no audio samples; {fix}")


def stop_decoder(proc: subprocess.Popen) -> None:
    """Kill ffmpeg if it still runs and reap it, so no zombie is left behind."""
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def load_audio(path: str | Path, sample_rate: int) -> np.ndarray:
    """Decode a whole audio file to float32 mono at ``sample_rate`` (for tests and evaluation; renders stream)."""
    with AudioFileSource(path, sample_rate) as source:
        return np.concatenate(list(source))
