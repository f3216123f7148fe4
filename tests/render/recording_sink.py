"""A render sink in one file, registered by an entry point (``avatargen.sinks``): ``--publish record://FOLDER``
writes the frames a render shows (``frames.rgb``, raw), when each arrived (``times.txt``), their audio
(``audio.wav``) and how the render ended (``meta.json``). It imports nothing of avatargen but the sink contract."""

from __future__ import annotations

import json
import time
import wave
from pathlib import Path

import numpy as np

from avatargen.io.sink import SINK_AUDIO_RATE, SinkContext, SinkPlugin


class RecordingSink:
    """Frames to ``frames.rgb`` with their arrival times, audio to ``audio.wav``, the ending to ``meta.json``."""

    def __init__(self, folder: Path, context: SinkContext) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder, self.context = folder, context
        self.frames = open(folder / "frames.rgb", "wb")
        self.times = open(folder / "times.txt", "w")
        self.audio = wave.open(str(folder / "audio.wav"), "wb")
        self.audio.setnchannels(2)
        self.audio.setsampwidth(2)
        self.audio.setframerate(SINK_AUDIO_RATE)
        self.count = 0

    def write(self, frames: np.ndarray) -> None:
        now = time.monotonic()
        for frame in frames:
            self.frames.write(frame.tobytes())
            self.times.write(f"{now:.6f}\n")
        self.count += len(frames)

    def write_audio(self, pcm: bytes) -> None:
        self.audio.writeframes(pcm)

    def close(self, finished: bool) -> None:
        self.frames.close()
        self.times.close()
        self.audio.close()
        c = self.context
        meta = {"finished": finished, "frames": self.count, "width": c.width, "height": c.height, "fps": c.fps,
                "paced": c.paced, "targets": list(c.targets), "config_fps": c.config.model.fps}
        (self.folder / "meta.json").write_text(json.dumps(meta))


def open_sink(context: SinkContext) -> RecordingSink:
    (target,) = context.targets
    return RecordingSink(Path(target.removeprefix("record://")), context)


PLUGIN = SinkPlugin(open=open_sink, schemes=("record",))
