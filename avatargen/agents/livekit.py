"""A LiveKit Agents avatar: ``AvatargenVideoGenerator`` is a ``VideoGenerator`` (livekit.agents.voice.avatar) over
avatargen's live render (``LiveAvatar``), for ``AvatarRunner``. ``pip install 'avatargen[livekit]'``.

``push_audio`` feeds the agent's speech into the live render; ``clear_buffer`` (barge-in) drops what is not shown
yet and the face is at rest from the next frame; iterating it gives, every 1/fps s, a ``rtc.VideoFrame`` (RGB24),
then the ``rtc.AudioFrame`` of the speech that plays with it (the samples pushed, unchanged) and an
``AudioSegmentEnd`` after an utterance's last frame. examples/livekit_agent.py runs one in a LiveKit room.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

from livekit import rtc
from livekit.agents.voice.avatar import AudioSegmentEnd, AvatarOptions, VideoGenerator

from avatargen.agents.live_avatar import LiveAvatar, ShownFrame


class AvatargenVideoGenerator(VideoGenerator):
    """``image`` speaking what the agent says. ``await start()`` loads the model and starts the live render (once);
    ``avatar_options`` then gives ``AvatarRunner`` the video's size and rate. ``sample_rate`` / ``channels``: the
    audio it is pushed and yields (other rates are resampled on the way in); ``overrides``: config overrides."""

    def __init__(self, image: str | Path, *, sample_rate: int = 24000, channels: int = 1,
                 overrides: tuple[str, ...] = ()) -> None:  # fmt: skip
        self.avatar = LiveAvatar(image, sample_rate=sample_rate, channels=channels, overrides=overrides)
        self._frames: asyncio.Queue[ShownFrame | None] = asyncio.Queue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._resampler: rtc.AudioResampler | None = None
        self._resampled_from = 0

    async def start(self) -> None:
        """Load the model and start the live render; frames flow from here on (idle until speech is pushed)."""
        self._loop = asyncio.get_running_loop()
        await asyncio.to_thread(self.avatar.start, self._frame_shown)

    @property
    def avatar_options(self) -> AvatarOptions:
        a = self.avatar
        return AvatarOptions(video_width=a.width, video_height=a.height, video_fps=a.fps,
                             audio_sample_rate=a.sample_rate, audio_channels=a.channels)  # fmt: skip

    async def aclose(self) -> None:
        """End the live render."""
        await asyncio.to_thread(self.avatar.close)
        self._frames.put_nowait(None)

    # -- VideoGenerator ---------------------------------------------------------------------------------------------

    async def push_audio(self, frame: rtc.AudioFrame | AudioSegmentEnd) -> None:
        if isinstance(frame, AudioSegmentEnd):
            if self._resampler is not None:  # what it holds back belongs to this utterance
                for piece in self._resampler.flush():
                    self.avatar.push(bytes(piece.data))
            self.avatar.end_segment()
            return
        self.avatar.push(bytes(self._as_ours(frame).data))

    def clear_buffer(self) -> None:
        self.avatar.clear()
        # frames already handed over but not taken: made before the clear, shown as the face at rest
        waiting = []
        while not self._frames.empty():
            waiting.append(self._frames.get_nowait())
        rest = self.avatar.rest_frame()
        for item in waiting:
            self._frames.put_nowait(item if item is None or rest is None else ShownFrame(item.index, rest))

    def __aiter__(self) -> AsyncIterator[rtc.VideoFrame | rtc.AudioFrame | AudioSegmentEnd]:
        return self._stream()

    async def _stream(self) -> AsyncIterator[rtc.VideoFrame | rtc.AudioFrame | AudioSegmentEnd]:
        a = self.avatar
        while (shown := await self._frames.get()) is not None:
            yield rtc.VideoFrame(a.width, a.height, rtc.VideoBufferType.RGB24, shown.rgb.tobytes())
            if shown.audio:
                samples = len(shown.audio) // (2 * a.channels)
                yield rtc.AudioFrame(shown.audio, a.sample_rate, a.channels, samples)
            for _ in range(shown.segment_ends):
                yield AudioSegmentEnd()
        if a.error is not None:
            raise a.error

    # -- helpers ----------------------------------------------------------------------------------------------------

    def _frame_shown(self, shown: ShownFrame) -> None:
        """On the render's pacing thread: hand the frame to the event loop."""
        self._loop.call_soon_threadsafe(self._frames.put_nowait, shown)

    def _as_ours(self, frame: rtc.AudioFrame) -> rtc.AudioFrame:
        """``frame`` at the avatar's rate and channels (LiveKit's resampler; the same frame when it already is)."""
        a = self.avatar
        if frame.sample_rate == a.sample_rate and frame.num_channels == a.channels:
            return frame
        if frame.num_channels != a.channels:
            raise ValueError(f"audio of {frame.num_channels} channels pushed to an avatar of {a.channels}; create "
                             f"the generator with channels={frame.num_channels}")  # fmt: skip
        if self._resampler is None or self._resampled_from != frame.sample_rate:
            self._resampler = rtc.AudioResampler(frame.sample_rate, a.sample_rate, num_channels=a.channels)
            self._resampled_from = frame.sample_rate
        pieces = self._resampler.push(frame)
        return rtc.combine_audio_frames(pieces) if pieces else rtc.AudioFrame(b"", a.sample_rate, a.channels, 0)
