"""The LiveKit Agents avatar driven by the real livekit-agents types, no server: an agent's speech goes in through a
``QueueAudioOutput`` (what an ``AgentSession`` writes its TTS into), ``AvatargenVideoGenerator`` makes the frames,
and they go into LiveKit's own ``AVSynchronizer`` as ``AvatarRunner`` does. The frames' mouth region is read like a
viewer's (tests/live/speech_feed.py)."""

from __future__ import annotations

import asyncio
import subprocess
import time
from importlib.util import find_spec

import imageio_ffmpeg
import numpy as np
import pytest

from tests.conftest import REPO
from tests.live.speech_feed import mouth_box

agents = pytest.importorskip("livekit.agents", reason="livekit-agents is not installed: pip install -e '.[livekit]'",
                            exc_type=ImportError)  # (installed beside MediaPipe it fails to import: protobuf)
from livekit import rtc  # noqa: E402
from livekit.agents.voice.avatar import AudioSegmentEnd, QueueAudioOutput  # noqa: E402

from avatargen.agents.livekit import AvatargenVideoGenerator  # noqa: E402

AVATAR = REPO / "examples" / "avatar_1.png"
# Where mouth_box(AVATAR) finds the mouth with the eval extra's face detector; the livekit extra goes without it
# (protobuf: docs/live.md), and the bundled square avatar is framed the same either way.
AVATAR_MOUTH = (136, 169, 100, 155)
RATE = 24000
FPS = 25


def speech(seconds: float, start_s: float = 0.5) -> bytes:
    """``seconds`` of the example speech, 24 kHz mono s16le (what a TTS gives an agent)."""
    return subprocess.run([imageio_ffmpeg.get_ffmpeg_exe(), "-v", "error", "-ss", str(start_s), "-t", str(seconds),
                           "-i", str(REPO / "examples" / "speech_1.flac"), "-f", "s16le", "-ar", str(RATE), "-ac", "1",
                           "pipe:1"], capture_output=True, check=True).stdout  # fmt: skip


async def say(agent: QueueAudioOutput, pcm: bytes) -> None:
    """An agent's utterance as its TTS hands it over: 10-ms frames, faster than real time, then the end."""
    piece = RATE // 100 * 2
    for k in range(0, len(pcm), piece):
        chunk = pcm[k : k + piece]
        await agent.capture_frame(rtc.AudioFrame(chunk, RATE, 1, len(chunk) // 2))
    agent.flush()


class Session:
    """An ``AvatargenVideoGenerator`` run as ``AvatarRunner`` runs one: the agent's audio pushed in, its output read
    (each item with when it came) and handed to a real ``AVSynchronizer``."""

    def __init__(self, generator: AvatargenVideoGenerator, agent: QueueAudioOutput) -> None:
        self.generator, self.agent = generator, agent
        self.items: list[tuple[float, object]] = []
        o = generator.avatar_options
        self.sync = rtc.AVSynchronizer(audio_source=rtc.AudioSource(o.audio_sample_rate, o.audio_channels),
                                       video_source=rtc.VideoSource(o.video_width, o.video_height),
                                       video_fps=o.video_fps)  # fmt: skip
        agent.on("clear_buffer", generator.clear_buffer)  # AvatarRunner._on_clear_buffer
        self.tasks = [asyncio.create_task(self._read_audio()), asyncio.create_task(self._forward())]

    async def _read_audio(self) -> None:
        async for frame in self.agent:
            await self.generator.push_audio(frame)

    async def _forward(self) -> None:
        async for item in self.generator:
            self.items.append((time.time(), item))
            if not isinstance(item, AudioSegmentEnd):
                await self.sync.push(item)

    def video(self, since: float = 0.0, until: float = float("inf")) -> list[tuple[float, rtc.VideoFrame]]:
        return [(t, i) for t, i in self.items if isinstance(i, rtc.VideoFrame) and since <= t < until]

    def audio(self) -> bytes:
        return b"".join(bytes(i.data) for _, i in self.items if isinstance(i, rtc.AudioFrame))

    async def wait(self, condition, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            assert time.monotonic() < deadline, f"timed out; {len(self.items)} items so far"
            await asyncio.sleep(0.02)

    async def close(self) -> None:
        await self.generator.aclose()
        await asyncio.wait(self.tasks, timeout=10)
        await self.sync.aclose()


def mouth(frame: rtc.VideoFrame, box: tuple[int, int, int, int]) -> np.ndarray:
    rgb = np.frombuffer(bytes(frame.data), np.uint8).reshape(frame.height, frame.width, 3)
    return rgb[box[0] : box[1], box[2] : box[3]].astype(np.float32).mean(axis=2)


async def started() -> tuple[Session, QueueAudioOutput]:
    generator = AvatargenVideoGenerator(AVATAR, sample_rate=RATE)
    await generator.start()
    agent = QueueAudioOutput(sample_rate=RATE)
    return Session(generator, agent), agent


def avatar_mouth() -> tuple[int, int, int, int]:
    return mouth_box(AVATAR) if find_spec("dlib") is not None else AVATAR_MOUTH


def test_the_avatar_says_what_the_agent_says_in_step_and_barge_in_rests_its_mouth_within_0_2_s():
    box = avatar_mouth()
    first, second = speech(2.0), speech(3.0, start_s=3.0)

    async def run() -> tuple[Session, float]:
        session, agent = await started()
        try:
            await session.wait(lambda: len(session.video()) >= 40, 60)  # idle frames before any speech
            await say(agent, first)
            await session.wait(lambda: any(isinstance(i, AudioSegmentEnd) for _, i in session.items), 120)
            heard = len(session.audio())
            await say(agent, second)
            await session.wait(lambda: len(session.audio()) >= heard + RATE * 2, 120)  # 1 s of it plays
            agent.clear_buffer()  # the user talks over the agent
            cleared_at = time.time()
            await session.wait(lambda: len(session.video(since=cleared_at + 0.2)) >= 15, 60)
        finally:
            await session.close()
        return session, cleared_at

    session, cleared_at = asyncio.run(run())
    items = session.items
    frames = [i for _, i in items if isinstance(i, rtc.VideoFrame)]
    assert all((f.width, f.height, f.type) == (256, 256, rtc.VideoBufferType.RGB24) for f in frames)

    # The first utterance comes out as it went in, byte for byte, each frame's audio right after the frame, and
    # its end after its last audio.
    end = next(k for k, (_, i) in enumerate(items) if isinstance(i, AudioSegmentEnd))
    said = b"".join(bytes(i.data) for _, i in items[:end] if isinstance(i, rtc.AudioFrame))
    assert said == first
    audio_at = [k for k, (_, i) in enumerate(items) if isinstance(i, rtc.AudioFrame)]
    assert all(isinstance(items[k - 1][1], rtc.VideoFrame) for k in audio_at)
    assert all(i.samples_per_channel == RATE // FPS for k in audio_at[:-1] if k < end for i in [items[k][1]])
    assert sum(isinstance(i, AudioSegmentEnd) for _, i in items) == 1  # the cleared utterance never "ended"

    # The mouth moves with the speech it shows: from frame to frame, far more than at rest (the idle motion's slow
    # sway moves the mouth region a little every frame; speech opens and shuts it).
    crops = [(k, t, mouth(i, box)) for k, (t, i) in enumerate(items) if isinstance(i, rtc.VideoFrame)]
    place = {k: n for n, (k, _, _) in enumerate(crops)}  # item -> its place among the video frames
    motion = [0.0] + [float(np.abs(b[2] - a[2]).mean()) for a, b in zip(crops, crops[1:])]
    spoken = [place[k - 1] for k in audio_at]
    idle = [n for n, (_, t, _) in enumerate(crops) if t < cleared_at and min(abs(n - m) for m in spoken) > 12]
    at_rest = float(np.percentile([motion[n] for n in idle], 95))
    speaking = float(np.percentile([motion[n] for n in spoken], 90))
    assert len(idle) >= 20 and speaking > 3 * max(at_rest, 1.0), (speaking, at_rest)

    # Barge-in: from 0.2 s after clear_buffer the mouth is still and shows a resting face (one shown at idle), and
    # no more of that speech plays.
    after = [n for n, (_, t, _) in enumerate(crops) if t >= cleared_at + 0.2][:25]
    # (the first of them may still differ from the frame before it: a render stalled by a busy machine shows the
    # change of face late)
    assert max(motion[n] for n in after[1:]) <= 2 * max(at_rest, 1.0), [round(motion[n], 1) for n in after]
    quiet = [n for n, (_, t, _) in enumerate(crops) if t < cleared_at and min(abs(n - m) for m in spoken) > 8]
    resting = min(float(np.abs(crops[after[0]][2] - crops[n][2]).mean()) for n in quiet)
    assert resting < 1.5, resting  # the face of a frame shown at rest
    assert not any(isinstance(i, rtc.AudioFrame) and t > cleared_at + 0.05 for t, i in items)


@pytest.mark.slow
def test_for_60_s_frames_come_at_25_fps_and_none_is_late_by_more_than_a_frame_interval():
    """An agent that speaks 2 s every 4 s for a minute: the frames keep the model's rate on the wall clock."""
    utterance = speech(2.0)

    async def run() -> Session:
        session, agent = await started()
        try:
            await session.wait(lambda: len(session.video()) >= 1, 60)
            begun = time.monotonic()
            while time.monotonic() - begun < 60:
                if int(time.monotonic() - begun) % 4 == 0:
                    await say(agent, utterance)
                    await asyncio.sleep(1.0)
                await asyncio.sleep(0.05)
        finally:
            await session.close()
        return session

    session = asyncio.run(run())
    times = np.asarray([t for t, _ in session.video()])
    times = times[times <= times[0] + 60]
    index = np.arange(len(times))
    # Lateness against the frame clock that fits best: frame k is due k/fps after the earliest possible start.
    lateness = times - index / FPS - np.min(times - index / FPS)
    assert len(times) >= 60 * FPS - 2, len(times)
    assert lateness.max() <= 1 / FPS, f"a frame came {lateness.max():.3f} s late (at {np.argmax(lateness) / FPS:.1f} s)"
    assert len(session.audio()) >= 10 * len(utterance)  # the speech played all along
