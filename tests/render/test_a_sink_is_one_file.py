"""A new render sink is one file: it receives the frames the MP4 shows and their audio, behind the real-time pacer
when the render is paced, and is closed once. ``tests/render/recording_sink.py`` is such a file, registered by an
entry point of a package it is not part of, with no edit to avatargen."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import wave
from pathlib import Path

import imageio_ffmpeg
import numpy as np
import pytest

from avatargen.config.loader import load_config
from avatargen.io.sink import SINK_AUDIO_RATE, SinkContext, register_sink, unregister_sink
from avatargen.render import RenderRequest, render
from tests.conftest import FAST, REPO, run_cli
from tests.ffmpeg_probe import decode_frames

SAMPLES_PER_FRAME = SINK_AUDIO_RATE // 25


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return 10 * np.log10(255.0**2 / mse)


def _decoded_audio(path: Path) -> np.ndarray:
    """``path``'s audio as the sinks get it: 48 kHz stereo s16 (samples, 2)."""
    out = subprocess.run([imageio_ffmpeg.get_ffmpeg_exe(), "-v", "error", "-i", str(path), "-f", "s16le", "-ar",
                          str(SINK_AUDIO_RATE), "-ac", "2", "pipe:1"], capture_output=True, check=True).stdout  # fmt: skip
    return np.frombuffer(out, "<i2").reshape(-1, 2)


def _recorded(folder: Path) -> tuple[dict, np.ndarray, np.ndarray, np.ndarray]:
    """What recording_sink.py wrote: (meta, frames (T, H, W, 3), arrival times (T,), audio (samples, 2))."""
    meta = json.loads((folder / "meta.json").read_text())
    frames = np.fromfile(folder / "frames.rgb", np.uint8).reshape(-1, meta["height"], meta["width"], 3)
    times = np.loadtxt(folder / "times.txt", ndmin=1)
    with wave.open(str(folder / "audio.wav")) as audio:
        samples = np.frombuffer(audio.readframes(audio.getnframes()), "<i2").reshape(-1, 2)
    return meta, frames, times, samples


@pytest.fixture
def entry_point(tmp_path) -> dict[str, str]:
    """An installed distribution (its metadata on PYTHONPATH) declaring recording_sink.py as an avatargen.sinks
    entry point: the environment a render subprocess needs to find it."""
    dist = tmp_path / "site" / "recording_sink-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: recording-sink\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[avatargen.sinks]\nrecord = tests.render.recording_sink:PLUGIN\n")
    return {"PYTHONPATH": f"{dist.parent}:{REPO}"}


def test_an_entry_point_sink_gets_the_frames_and_the_audio_of_the_mp4(tmp_path, face_png, speech_wav, entry_point):
    out, folder = tmp_path / "o.mp4", tmp_path / "recorded"
    result = run_cli("render", "-i", str(face_png), "-a", str(speech_wav), "-o", str(out), "--publish",
                     f"record://{folder}", *FAST, env_extra=entry_point)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    meta, frames, _, audio = _recorded(folder)
    shown = decode_frames(out)
    assert meta["finished"] and meta["targets"] == [f"record://{folder}"] and meta["config_fps"] == 25
    assert frames.shape == shown.shape and frames.shape[0] == 75 and _psnr(frames, shown) > 30
    # every frame's audio, and it is the input's (48 kHz stereo, the encoder's track)
    source = _decoded_audio(speech_wav)
    assert len(audio) == 75 * SAMPLES_PER_FRAME
    assert np.corrcoef(audio[: len(source), 0], source[: len(audio), 0])[0, 1] > 0.99


def test_a_paced_live_render_hands_a_sink_frames_on_the_clock_with_their_audio(tmp_path, face_png, speech_wav,
                                                                               entry_point):  # fmt: skip
    out, folder = tmp_path / "o.mp4", tmp_path / "recorded"
    with open(speech_wav, "rb") as stdin:
        result = subprocess.run(
            [sys.executable, "-m", "avatargen", "render", "-i", str(face_png), "-a", "-", "-o", str(out),
             "--realtime", "--publish", f"record://{folder}", *FAST, "output.realtime_target_s=0"],
            stdin=stdin, capture_output=True, text=True, timeout=300, env={**os.environ, **entry_point},
        )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    meta, frames, times, audio = _recorded(folder)
    assert meta["finished"] and meta["paced"] and len(frames) == 75
    gaps = np.diff(times)
    assert 0.035 < np.median(gaps) < 0.045, gaps  # one frame every 40 ms: behind the pacer, not in chunk bursts
    assert np.array_equal(frames, decode_frames(out)) or _psnr(frames, decode_frames(out)) > 30
    # the audio that came on stdin, cut to the frames (the pacer's audio, from the first frame on)
    assert abs(len(audio) - 75 * SAMPLES_PER_FRAME) < SAMPLES_PER_FRAME
    source = _decoded_audio(speech_wav)
    assert np.corrcoef(audio[:72000, 0], source[:72000, 0])[0, 1] > 0.99


class FrameCollector:
    """A sink registered in-process that keeps every frame and every byte of audio it is handed."""

    def __init__(self, context: SinkContext) -> None:
        self.context = context
        self.parts: list[np.ndarray] = []
        self.audio = bytearray()
        self.closed: list[bool] = []

    def write(self, frames: np.ndarray) -> None:
        self.parts.append(frames.copy())

    def write_audio(self, pcm: bytes) -> None:
        self.audio += pcm

    def close(self, finished: bool) -> None:
        self.closed.append(finished)


@pytest.fixture
def collectors():
    opened: list[FrameCollector] = []

    def factory(context: SinkContext) -> FrameCollector:
        opened.append(FrameCollector(context))
        return opened[-1]

    register_sink(factory)
    yield opened
    unregister_sink(factory)


@pytest.mark.parametrize("composite", ["true", "false"])
def test_a_registered_sink_receives_the_frames_the_mp4_shows(tmp_path, face_png, speech_wav, collectors, composite):
    out = tmp_path / "o.mp4"
    report = render(RenderRequest(image=face_png, audio=speech_wav, output=out),
                    load_config([*FAST, f"pipeline.composite={composite}"]), warn=lambda line: None)  # fmt: skip
    (sink,) = collectors
    frames = np.concatenate(sink.parts)
    shown = decode_frames(out)
    assert sink.closed == [True]  # closed once, as finished
    assert (sink.context.fps, sink.context.start_frame, sink.context.output) == (25, 0, out)
    assert frames.shape == shown.shape == (report["frames"], sink.context.height, sink.context.width, 3)
    assert frames.shape[0] == 75 and not np.array_equal(frames[0], frames[-1])  # the whole render, moving
    assert _psnr(frames, shown) > 30  # the same video the MP4 holds, before x264's losses
    assert len(sink.audio) == sink.context.audio_bytes(75)


class FailingCollector(FrameCollector):
    """Fails on its second batch, as a sink whose receiver went away would."""

    def write(self, frames: np.ndarray) -> None:
        if self.parts:
            raise ConnectionError("the receiver went away")
        super().write(frames)


def test_a_render_that_fails_closes_its_sinks_as_unfinished(tmp_path, face_png, speech_wav):
    opened: list[FrameCollector] = []

    def factory(context: SinkContext) -> FrameCollector:
        opened.append(FailingCollector(context))
        return opened[-1]

    register_sink(factory)
    try:
        with pytest.raises(ConnectionError):
            render(RenderRequest(image=face_png, audio=speech_wav, output=tmp_path / "o.mp4"), load_config(FAST),
                   warn=lambda line: None)  # fmt: skip
    finally:
        unregister_sink(factory)
    (sink,) = opened
    assert len(sink.parts) == 1 and sink.closed == [False]
