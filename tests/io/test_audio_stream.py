"""--audio -: WAV from a pipe, whatever its sample format, reaches the model as the same samples a file would."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest
import soundfile as sf

from avatargen.errors import BadInputError
from avatargen.io.audio import load_audio
from avatargen.io.audio_stream import AudioStreamSource


def stream(data: bytes) -> tuple[AudioStreamSource, threading.Thread]:
    read_fd, write_fd = os.pipe()

    def produce() -> None:
        with os.fdopen(write_fd, "wb") as pipe:
            pipe.write(data)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    return AudioStreamSource(16000, 4000, stream=os.fdopen(read_fd, "rb")), producer


@pytest.mark.parametrize(("subtype", "channels"), [("PCM_16", 1), ("PCM_24", 2), ("FLOAT", 1), ("PCM_16", 3)])
def test_wav_from_a_pipe_decodes_like_the_file(tmp_path, subtype, channels):
    t = np.arange(22050) / 22050
    signal = np.stack([0.3 * np.sin(2 * np.pi * (220 + 110 * c) * t) for c in range(channels)], axis=1)
    path = tmp_path / "a.wav"
    sf.write(path, signal, 22050, subtype=subtype)  # 3 channels: WAVE_FORMAT_EXTENSIBLE
    source, producer = stream(path.read_bytes())
    streamed = np.concatenate(list(source))
    producer.join()
    np.testing.assert_allclose(streamed, load_audio(path, 16000), atol=1e-4)


def test_not_wav_is_a_clear_error():
    source, _ = stream(b"ID3\x04" + bytes(1000))  # an MP3: only WAV or raw PCM come through a pipe
    with pytest.raises(BadInputError, match="no WAV header on stdin; pipe WAV into --audio -, or raw s16le PCM"):
        list(source)
