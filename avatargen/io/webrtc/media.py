"""One encode for every viewer: frames to H.264 (constrained baseline, as browsers decode it over WebRTC) and their
audio to Opus, each packet handed to every viewer's tracks, which aiortc sends as they are (no encode per viewer).

A viewer that joins asks for a key frame: the next frame is an IDR frame (with its SPS/PPS), so it starts within a
frame; until then its video track waits. A viewer whose queue is full (its connection cannot keep up) loses its
oldest packets, and its video waits for the next key frame, which it asks for: the others are not held back."""

from __future__ import annotations

import asyncio
import fractions
from typing import Callable

import av
import numpy as np
from aiortc import MediaStreamTrack
from aiortc.mediastreams import MediaStreamError

from avatargen.io.sink import SINK_AUDIO_RATE

OPUS_FRAME = 960  # samples of one Opus packet: 20 ms at 48 kHz, what WebRTC peers expect
KEYFRAME_SECONDS = 2  # a key frame at least this often: a viewer that lost packets recovers within it
QUEUE_PACKETS = 100  # per viewer and track: 2-4 s of media


class PacketTrack(MediaStreamTrack):
    """One viewer's audio or video track: the shared encoder's packets, in order (aiortc packs them into RTP)."""

    def __init__(self, kind: str, ask_key_frame: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.kind = kind
        self._queue: asyncio.Queue[av.Packet | None] = asyncio.Queue(maxsize=QUEUE_PACKETS)
        self._ask_key_frame = ask_key_frame
        self._waiting_for_key = kind == "video"

    def offer(self, packet: av.Packet) -> None:
        """Queue ``packet`` (on the event loop's thread); video waits for a key frame to start or after a loss."""
        if self._waiting_for_key:
            if not packet.is_keyframe:
                return
            self._waiting_for_key = False
        if self._queue.full():
            while not self._queue.empty():
                self._queue.get_nowait()
            if self.kind == "video":
                self._waiting_for_key = True
                if self._ask_key_frame is not None:
                    self._ask_key_frame()
                return
        self._queue.put_nowait(packet)

    def end(self) -> None:
        """No more packets: the sender stops after what is queued."""
        if self._queue.full():
            self._queue.get_nowait()
        self._queue.put_nowait(None)

    async def recv(self) -> av.Packet:
        packet = await self._queue.get()
        if packet is None:
            self.stop()
            raise MediaStreamError
        return packet


class SharedEncoder:
    """Frames (H, W, 3) uint8 and their audio (48 kHz stereo s16le) to H.264 and Opus packets, once.

    ``encode_frame`` and ``encode_audio`` run on the caller's thread (the pacer's); their packets come back in the
    order they must be sent. ``want_key_frame()`` (any thread) makes the next frame an IDR frame."""

    def __init__(self, width: int, height: int, fps: int) -> None:
        self.fps = fps
        video = av.CodecContext.create("libx264", "w")
        video.width, video.height, video.pix_fmt = width, height, "yuv420p"
        video.time_base = fractions.Fraction(1, fps)
        video.framerate = fractions.Fraction(fps, 1)
        video.gop_size = KEYFRAME_SECONDS * fps
        video.profile = "Baseline"  # constrained baseline (42e0..): what every browser's WebRTC stack decodes
        # zerolatency: no B-frames, no look-ahead, each frame out as soon as it is encoded; a capped rate keeps key
        # frames from bursting the path (2 Mbit/s is plenty for a talking head up to 720p).
        video.options = {"preset": "veryfast", "tune": "zerolatency", "crf": "23", "maxrate": "2000k",
                         "bufsize": "1000k", "forced-idr": "1"}  # fmt: skip
        self._video = video
        audio = av.CodecContext.create("libopus", "w")
        audio.sample_rate, audio.layout, audio.format = SINK_AUDIO_RATE, "stereo", "s16"
        audio.time_base = fractions.Fraction(1, SINK_AUDIO_RATE)
        audio.bit_rate = 64000
        self._audio = audio
        self._frame = 0
        self._sample = 0
        self._key_frame_wanted = True

    def want_key_frame(self) -> None:
        self._key_frame_wanted = True

    def encode_frame(self, rgb: np.ndarray) -> list[av.Packet]:
        """One frame's H.264 packets (zerolatency: the frame itself)."""
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
        frame.pts, frame.time_base = self._frame, self._video.time_base
        if self._key_frame_wanted:
            self._key_frame_wanted = False
            frame.pict_type = av.video.frame.PictureType.I
        self._frame += 1
        return self._stamped(self._video.encode(frame), self._video.time_base)

    def encode_audio(self, pcm: bytes) -> list[av.Packet]:
        """Opus packets of ``pcm``, a whole number of 20-ms pieces (``OPUS_FRAME`` samples, stereo s16le)."""
        samples = np.frombuffer(pcm, "<i2").reshape(1, -1)  # packed stereo: (1, 2 * n)
        packets = []
        for start in range(0, samples.shape[1], 2 * OPUS_FRAME):
            frame = av.AudioFrame.from_ndarray(samples[:, start : start + 2 * OPUS_FRAME], format="s16", layout="stereo")
            frame.sample_rate, frame.pts = SINK_AUDIO_RATE, self._sample
            frame.time_base = self._audio.time_base
            self._sample += OPUS_FRAME
            packets += self._stamped(self._audio.encode(frame), self._audio.time_base)
        return packets

    @staticmethod
    def _stamped(packets: list[av.Packet], time_base: fractions.Fraction) -> list[av.Packet]:
        for packet in packets:
            packet.time_base = time_base  # aiortc turns pts into the RTP clock with it
        return packets
