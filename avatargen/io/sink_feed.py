"""The encoder and a render's sinks as one frame sink: every frame, and its audio, goes to each of them.

It sits where the encoder sat: behind the pacer when the render is paced (so the sinks get frames on the wall clock,
and in live mode the audio the pacer lets out with them), or straight behind the compositor. A render whose audio
is a file gives the sinks that file's audio, decoded here frame by frame (the encoder reads the file itself).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np

from avatargen.io.audio_mix import AudioMix
from avatargen.io.ffmpeg import StderrTail, start_ffmpeg
from avatargen.io.sink import SINK_AUDIO_RATE, FrameSink, RenderSink


class FileAudioReader:
    """A file's audio (or a speakers' mix) from ``start_s`` on, as 48 kHz stereo s16le read in order from one
    ffmpeg pipe (constant memory: ffmpeg decodes only as far ahead as the pipe holds). Past the audio's end, zeros."""

    def __init__(self, audio: Path | AudioMix, start_s: float = 0.0) -> None:
        mix = audio if isinstance(audio, AudioMix) else AudioMix((Path(audio),))
        inputs, mapping = mix.ffmpeg_args(0, start_s)
        self._proc = start_ffmpeg(["-v", "error", *inputs, *mapping, "-f", "s16le", "-ar", str(SINK_AUDIO_RATE),
                                   "-ac", "2", "pipe:1"], stdout=subprocess.PIPE)  # fmt: skip
        self._stderr = StderrTail(self._proc)

    def read(self, size: int) -> bytes:
        """The next ``size`` bytes of the track (zeros past its end)."""
        data = bytearray()
        while len(data) < size and (piece := self._proc.stdout.read(size - len(data))):
            data += piece
        return bytes(data) + bytes(size - len(data))

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.stdout.close()
        self._proc.wait()
        self._stderr.join()


class SinkFeed:
    """A FrameSink with ``write_audio``: frames and audio to ``encoder``, then to each of ``sinks``.

    ``file_audio`` (the render's audio is a file): each batch's audio is read from it and handed to the sinks before
    the batch. Otherwise the audio comes through ``write_audio`` (a stream: from the pacer or the stdin decoder)."""

    def __init__(self, encoder: FrameSink, sinks: list[RenderSink], fps: int,
                 file_audio: FileAudioReader | None = None) -> None:  # fmt: skip
        self.encoder, self.sinks, self.fps = encoder, sinks, fps
        self._file_audio = file_audio
        self._frames = 0

    def write(self, frames: np.ndarray) -> None:
        if self._file_audio is not None:
            count = len(frames) if frames.ndim == 4 else 1
            size = self._audio_offset(self._frames + count) - self._audio_offset(self._frames)
            self._frames += count
            pcm = self._file_audio.read(size)
            for sink in self.sinks:
                sink.write_audio(pcm)
        self.encoder.write(frames)
        for sink in self.sinks:
            sink.write(frames)

    def write_audio(self, pcm: bytes) -> None:
        self.encoder.write_audio(pcm)
        for sink in self.sinks:
            sink.write_audio(pcm)

    def close(self) -> None:
        """The file's decoder stops (idempotent)."""
        if self._file_audio is not None:
            self._file_audio.close()
            self._file_audio = None

    def _audio_offset(self, frame: int) -> int:
        return frame * SINK_AUDIO_RATE // self.fps * 4
