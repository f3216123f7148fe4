"""A new frame sink is one file: this one registers itself (``register_sink``) and receives the frames of a render,
the frames the MP4 shows, with no other edit to avatargen."""

from __future__ import annotations

import numpy as np
import pytest

from avatargen.config.loader import load_config
from avatargen.io.sink import SinkContext, register_sink, unregister_sink
from avatargen.render import RenderRequest, render
from tests.conftest import FAST
from tests.ffmpeg_probe import decode_frames


class FrameCollector:
    """A sink that keeps every frame it is handed and how the render ended."""

    def __init__(self, context: SinkContext) -> None:
        self.context = context
        self.parts: list[np.ndarray] = []
        self.closed: list[bool] = []

    def write(self, frames: np.ndarray) -> None:
        self.parts.append(frames.copy())

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


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return 10 * np.log10(255.0**2 / mse)


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
