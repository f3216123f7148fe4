"""Audio in: any file ffmpeg reads, decoded to float32 mono at the model's sample rate, streamed in blocks."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Generator, Iterator
from pathlib import Path

import numpy as np

from avatargen.errors import AudioDecoderStopped, BadInputError
from avatargen.io.audio_mix import FROM_FILE_START
from avatargen.io.ffmpeg import StderrTail, ffmpeg_reason, local_file, read_checked_input, start_ffmpeg
from avatargen.io.input_files import AUDIO_FIX

_BYTES_PER_SAMPLE = 4  # f32le


class AudioFileSource:
    """Streams an audio file as float32 mono blocks of ``block_samples`` (the last one may be shorter).

    The file is checked when the source is built, so a bad file fails before any rendering starts. Iterating starts
    an ffmpeg decoder (``-vn -ac 1 -ar SR -f f32le pipe:1``, channels averaged) and reads its stdout block by block,
    so memory stays constant however long the file is. Each iteration decodes from the start. ``duration_hint`` is
    the container's duration in seconds for progress bars only (None when the container does not say); the decoded
    sample count is what counts.

    Damaged data (a bad packet, a truncated tail) is skipped as every player does, and reported, never silent: after
    an iteration ``damage`` says what the decoder found (its message, or that the file ends before its header says),
    for the caller to warn about. Errors: ``BadInputError`` for a missing/unreadable file, a file ffmpeg cannot open or
    without an audio stream, one that decodes to less than ``min_samples``; ``AudioDecoderStopped`` when the decoder
    dies or fails after it has given audio (a render then keeps what it made). Use as a context manager or call
    ``close()`` to stop the decoder.
    """

    def __init__(self, path: str | Path, sample_rate: int, block_samples: int = 16000, min_samples: int = 1) -> None:
        if sample_rate <= 0 or block_samples <= 0:
            raise ValueError(f"sample_rate and block_samples must be positive, got {sample_rate} and {block_samples}")
        self.path = Path(path)
        self.sample_rate = int(sample_rate)
        self.block_samples = int(block_samples)
        self.min_samples = max(1, int(min_samples))
        self.damage: str | None = None  # set by an iteration that met damaged data
        self._proc: subprocess.Popen | None = None
        self._blocks: Iterator[np.ndarray] | None = None
        self._started: subprocess.Popen | None = None  # a decoder started ahead of the next iteration

        info = read_checked_input(self.path, "audio", "Audio", AUDIO_FIX, failed="decoded")
        self.duration_hint: float | None = info.duration_s
        # A container's duration is its longest stream's: it says how long the audio is only when audio is all it holds
        self._audio_duration = info.duration_s if set(info.stream_kinds) == {"Audio"} else None
        # ffmpeg gives a WAV's duration from its size, so a cut WAV reads as complete: its header says otherwise
        self._header_shortfall = wav_shortfall(self.path)
        if (info.audio_codec or "").startswith("pcm_f"):
            self._refuse_non_finite()  # only float samples can hold NaN or Inf: found now, not by a model mid-render

    def _refuse_non_finite(self) -> None:
        """Decode the whole file once; ``BadInputError`` at its first NaN or infinite sample (a render would make
        noise of it, and a resume would meet it again)."""
        for _ in self:
            pass
        self.close()

    def start_decoding(self) -> None:
        """Start the next iteration's decoder now: its first blocks are then waiting when it is read (ffmpeg's start
        and first block are ~25 ms of a render's time to first frame). ``close`` stops it if no iteration comes.
        Call it from a thread that lives as long as the decoder is read: ffmpeg dies with the thread that started it
        (``die_with_parent``), and a pool's worker thread ends with its pool."""
        if self._started is None:
            self._started = self._start_decoder()

    def _start_decoder(self) -> subprocess.Popen:
        return start_ffmpeg(
            ["-v", "error", "-i", local_file(self.path), *model_audio_args(self.sample_rate)], stdout=subprocess.PIPE
        )

    def __iter__(self) -> Iterator[np.ndarray]:
        self._stop_iteration()  # a new iteration restarts decoding; never leave the previous decoder running
        self._blocks = self._decode()
        return self._blocks

    def _decode(self) -> Iterator[np.ndarray]:
        proc, self._started = self._started or self._start_decoder(), None
        self._proc = proc
        self.damage = None
        try:
            decoded = yield from read_blocks(proc, self.block_samples, self.sample_rate, f"audio file '{self.path}'",
                                             f"re-encode it or {AUDIO_FIX}", min_samples=self.min_samples)  # fmt: skip
            self.damage = decoded.damage
            seconds = decoded.samples / self.sample_rate
            if self.damage is None and self._audio_duration is not None and seconds < self._audio_duration - 0.1:
                self.damage = f"it ends at {seconds:.2f} s of the {self._audio_duration:.2f} s its header gives"
            self.damage = self.damage or self._header_shortfall
        finally:
            stop_decoder(proc)
            if self._proc is proc:
                self._proc = None

    def close(self) -> None:
        """Stop the decoder of the current iteration, and one started ahead, if any (the iterator then ends)."""
        self._stop_iteration()
        if self._started is not None:
            stop_decoder(self._started)
            self._started = None

    def _stop_iteration(self) -> None:
        if self._proc is not None:
            stop_decoder(self._proc)  # unblocks a reader stuck in read()
        if self._blocks is not None:
            self._blocks.close()  # runs the generator's cleanup now rather than at garbage collection
            self._blocks = None

    def __enter__(self) -> AudioFileSource:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def wav_shortfall(path: Path) -> str | None:
    """For a RIFF/WAVE file whose ``data`` chunk says more bytes than the file holds (an interrupted copy): how much
    of it is there; None for anything else (a sound WAV, a stream's 0 or 0xFFFFFFFF placeholder sizes, not a WAV)."""
    try:
        with open(path, "rb") as file:
            riff = file.read(12)
            if len(riff) < 12 or riff[:4] != b"RIFF" or riff[8:12] != b"WAVE":
                return None
            rate = align = 0
            while len(chunk := file.read(8)) == 8:
                kind, size = chunk[:4], int.from_bytes(chunk[4:], "little")
                if kind == b"data":
                    held = os.fstat(file.fileno()).st_size - file.tell()
                    if size in (0, 0xFFFFFFFF) or held >= size or not rate or not align:
                        return None
                    return f"it ends at {held / align / rate:.2f} s of the {size / align / rate:.2f} s its header gives"
                body = file.read(size + size % 2)
                if kind == b"fmt " and len(body) >= 16:
                    rate, align = int.from_bytes(body[4:8], "little"), int.from_bytes(body[12:14], "little")
    except OSError:
        return None
    return None


def model_audio_args(sample_rate: int) -> list[str]:
    """ffmpeg output arguments: the first audio stream as float32 mono at ``sample_rate`` on stdout."""
    # ffmpeg's default downmix sums stereo at -3 dB each (loud stereo then clips past 1.0); average instead. A stream
    # that starts after its file gets silence in front (io.audio_mix.FROM_FILE_START): the file's own timeline.
    return ["-map", "0:a:0", "-vn", "-ac", "1", "-ar", str(sample_rate), "-af",
            f"{FROM_FILE_START}:rematrix_maxval=1.0",
            "-f", "f32le", "-flush_packets", "1", "pipe:1"]  # fmt: skip


class Decoded:
    """What a finished decode gave: its sample count, and the decoder's first error message if it skipped data."""

    def __init__(self, samples: int, damage: str | None) -> None:
        self.samples = samples
        self.damage = damage


def read_blocks(
    proc: subprocess.Popen, block_samples: int, sample_rate: int, what: str, fix: str, live: bool = False,
    min_samples: int = 1,
) -> Generator[np.ndarray, None, Decoded]:  # fmt: skip
    """Read ffmpeg's float32 stdout in blocks of ``block_samples``; returns ``Decoded`` (``yield from``'s value).

    ffmpeg runs at ``-v error`` without ``-xerror``: damaged packets are skipped and the first error line is kept as
    ``Decoded.damage``. Fewer than ``min_samples`` samples is a ``BadInputError``; a decoder killed, or exiting
    non-zero after it gave audio, is ``AudioDecoderStopped`` (what was rendered from it is not the input's fault).
    ``live`` (a stream arriving in real time) yields whatever has arrived, up to a block, instead of waiting for a
    whole one: the pipeline then starts a chunk as soon as its audio is there, not up to a block later.
    """
    errors: list[str] = []
    stderr = StderrTail(proc, on_line=lambda line: errors.append(line) if not errors and line.strip() else None)
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
            block = np.frombuffer(data[:usable], dtype="<f4").astype(np.float32)
            if not np.isfinite(block).all():
                at = (total + int(np.argmin(np.isfinite(block)))) / sample_rate
                raise BadInputError(f"{what} holds NaN or infinite samples (the first at {at:.2f} s): it is damaged; {fix}")
            total += usable // _BYTES_PER_SAMPLE
            yield block
        if not chunk if live else len(chunk) < block_bytes:  # end of stream
            break
    returncode = proc.wait()
    stderr.join()
    damage = ffmpeg_reason(errors) if errors else None
    decoded_s = f"{total / sample_rate:.2f} s"
    if returncode < 0:
        raise AudioDecoderStopped(f"the decoder of {what} (ffmpeg) was killed by {signal.Signals(-returncode).name} after {decoded_s}")
    if returncode != 0 and total:
        raise AudioDecoderStopped(f"the decoder of {what} (ffmpeg) failed after {decoded_s} ({stderr.reason()})")
    if returncode != 0:
        raise BadInputError(f"{what} failed to decode ({stderr.reason()}); {fix}")
    if total == 0:
        raise BadInputError(f"{what} contains no audio samples{f' ({damage})' if damage else ''}; {fix}")
    if total < min_samples:
        raise BadInputError(f"{what} holds less than one video frame of audio ({decoded_s}{f': {damage}' if damage else ''}); {fix}")
    return Decoded(total, damage)


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
