"""The render sink behind ``--publish webrtc://``: the paced frames and their audio, encoded once (media.py) and sent
to every viewer of the WHEP server (server.py), each frame with the audio that goes with it."""

from __future__ import annotations

import numpy as np

from avatargen.io.console import say
from avatargen.io.sink import SinkContext
from avatargen.io.webrtc.media import OPUS_FRAME, SharedEncoder
from avatargen.io.webrtc.server import WhepServer
from avatargen.io.webrtc.target import WebRtcTarget

_OPUS_BYTES = OPUS_FRAME * 4


class WebRtcSink:
    """Serves ``target`` while the render runs. Frame k goes out with the audio up to its end, in whole Opus pieces:
    both tracks leave on the pacer's clock, so the browser's lip sync (RTCP sender reports) holds them together."""

    def __init__(self, target: WebRtcTarget, context: SinkContext) -> None:
        self.context = context
        self.encoder = SharedEncoder(context.width, context.height, context.fps)
        self.server = WhepServer(target, self.encoder.want_key_frame)
        self.server.start()
        self._pcm = bytearray()  # audio received, not yet encoded
        self._audio_sent = 0  # bytes encoded so far
        self._frames = 0
        token = "?token=..." if target.token else ""
        say(f"note: WebRTC viewer page at {target.url()}{token}; WHEP endpoint {target.url('whep')}")

    def write(self, frames: np.ndarray) -> None:
        for frame in frames if frames.ndim == 4 else frames[None]:
            self._frames += 1
            video = self.encoder.encode_frame(frame)
            self.server.send(video, self._audio_until(self.context.audio_bytes(self._frames)))

    def write_audio(self, pcm: bytes) -> None:
        self._pcm += pcm

    def close(self, finished: bool) -> None:
        self.server.send([], self._audio_until(self._audio_sent + len(self._pcm)))
        self.server.stop()

    def _audio_until(self, end: int) -> list:
        """Opus packets for the received audio up to byte ``end`` of the track (whole 20-ms pieces)."""
        count = (min(end, self._audio_sent + len(self._pcm)) - self._audio_sent) // _OPUS_BYTES * _OPUS_BYTES
        if count <= 0:
            return []
        pcm = bytes(self._pcm[:count])
        del self._pcm[:count]
        self._audio_sent += count
        return self.encoder.encode_audio(pcm)
