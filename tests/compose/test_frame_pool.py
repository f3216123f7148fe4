"""A photograph's frames composited on two threads at once are the frames composited on one (``FramePool``)."""

from __future__ import annotations

import numpy as np

from avatargen.compose.composite import CompositingSink
from avatargen.io.image import load_reference
from tests.conftest import REPO
from tests.eval import clips


class _Kept:
    def __init__(self) -> None:
        self.frames: list[np.ndarray] = []

    def write(self, frames: np.ndarray) -> None:
        self.frames.append(frames.copy())


def test_two_threads_composite_the_frames_one_thread_does_with_speech_and_a_blink(tmp_path):
    from avatargen.config.loader import load_config, to_config
    from avatargen.render.compositing import compositing_threads, compositor_for

    path = clips.write_png(tmp_path / "astronaut.png", clips.astronaut())
    config = to_config(load_config(["runtime.threads=2"]))

    def frames(threads: int) -> np.ndarray:
        loaded = load_reference(path, 256, "face", lambda line: None)
        speech = REPO / "examples" / "speech_1.flac"
        compositor = compositor_for(loaded, config, warn=lambda line: None, speech=speech)
        assert compositing_threads(compositor, config) == 2  # a photograph with its speech: no model beside it
        motion = compositor.warp.__self__
        blink = int(motion.blink_onsets(60.0)[0] * 25)  # frames from just before the first blink on
        kept = _Kept()
        sink = CompositingSink(compositor, [kept], first_frame=max(0, blink - 6), threads=threads)
        blank = np.zeros((12, 256, 256, 3), dtype=np.uint8)
        for size in (1, 11, 12, 7):  # the segments' sizes vary (the first frame leaves alone)
            sink.write(blank[:size])
        sink.close()
        return np.concatenate(kept.frames)

    serial, parallel = frames(1), frames(2)
    assert serial.shape[0] == 31
    np.testing.assert_array_equal(parallel, serial)
    assert np.abs(serial[1:].astype(int) - serial[:-1]).max() > 30  # the mouth and lids did move
