"""A LiveKit voice agent whose face is avatargen: the agent's speech drives a live render of examples/avatar_1.png,
published into the room (video and the same audio, in step) by LiveKit's AvatarRunner.

    pip install 'avatargen[livekit]'
    livekit-server --dev                                  # a local server (ws://localhost:7880, devkey / secret)
    export LIVEKIT_URL=ws://localhost:7880 LIVEKIT_API_KEY=devkey LIVEKIT_API_SECRET=secret
    python examples/livekit_agent.py dev                  # then join the room from any LiveKit client

The speech-to-text, language model and voice below come from LiveKit Inference (LiveKit Cloud); on a server of your
own, give the AgentSession plugins instead (e.g. livekit-plugins-openai). docs/live.md, "A LiveKit Agents avatar".
"""

from __future__ import annotations

from pathlib import Path

from livekit.agents import Agent, AgentSession, JobContext, WorkerOptions, cli
from livekit.agents.voice.room_io import RoomOptions
from livekit.agents.voice.avatar import AvatarRunner, QueueAudioOutput

from avatargen.agents.livekit import AvatargenVideoGenerator

FACE = Path(__file__).resolve().parent / "avatar_1.png"
RATE = 24000  # the agent's voice, and the avatar's audio track


async def entrypoint(ctx: JobContext) -> None:
    await ctx.connect()
    face = AvatargenVideoGenerator(FACE, sample_rate=RATE)
    await face.start()  # the model loads once, here; the face idles until the agent speaks
    voice = QueueAudioOutput(sample_rate=RATE)  # the agent's speech, handed to the avatar instead of the room
    runner = AvatarRunner(ctx.room, audio_recv=voice, video_gen=face, options=face.avatar_options)
    await runner.start()
    ctx.add_shutdown_callback(runner.aclose)
    ctx.add_shutdown_callback(face.aclose)

    session = AgentSession(stt="assemblyai/universal-streaming", llm="openai/gpt-4.1-mini",
                           tts="cartesia/sonic-2")  # fmt: skip
    session.output.audio = voice
    await session.start(agent=Agent(instructions="You are a friendly assistant. Keep your answers short."),
                        room=ctx.room, room_options=RoomOptions(audio_output=False))  # fmt: skip
    await session.generate_reply(instructions="Greet the user.")


if __name__ == "__main__":
    cli.run_app(WorkerOptions(entrypoint_fnc=entrypoint))
