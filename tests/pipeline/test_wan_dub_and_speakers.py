"""`model=wan_tiny` dubbing a source video and rendering two speakers, in process: which source frames each clip is
conditioned on (InfiniteTalk's sparse frames: the one at each clip's start, read in order once), two speakers'
tracks routed by their regions, and a stopped render of either resuming with the uninterrupted frames."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from avatargen.config.loader import load_config, to_config
from avatargen.io.audio_stats import TrackStats
from tests.conftest import engine_of
from avatargen.pipeline.build import pipeline_for, place_models
from avatargen.pipeline.checkpoint import RenderCheckpoint
from avatargen.pipeline.inputs import RenderInputs
from avatargen.pipeline.pipeline import Pipeline
from avatargen.pipeline.schedule import checkpoint_grid
from avatargen.runtime.distributed import ParallelContext, world_info
from tests.conftest import FrameList
from avatargen.pipeline.run import RenderRun

SPEECH = np.sin(np.arange(int(16000 * 1.5)) / 10).astype(np.float32) * np.sin(np.arange(24000) / 900)  # 38 frames


class _Source:
    """A source video whose frame i is a picture moving right with i; it records what is asked."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    def frame(self, index: int) -> np.ndarray:
        self.asked.append(index)
        image = np.zeros((64, 64, 3), dtype=np.uint8)
        image[:], image[16:48, min(index, 40) : min(index, 40) + 24] = (200, 90, 60), (40, 160, 210)
        return image


def _pipeline() -> Pipeline:
    torch.set_num_threads(1)
    config = to_config(load_config(["model=wan_tiny", "model.wan.sampling_steps=2"]))
    return pipeline_for(config, place_models(config, engine_of(config), torch.device("cpu"), ParallelContext(world_info())), engine_of(config))


def _stop_and_resume(render, pipeline: Pipeline) -> tuple[np.ndarray, np.ndarray]:
    """(the uninterrupted frames, the frames of a render stopped at its first resume point and resumed)."""
    whole = FrameList()
    render(pipeline, [whole])
    saved = []

    def keep(point: RenderCheckpoint) -> None:  # through the files' format
        tensors, meta = point.to_tensors()
        saved.append(({k: v.clone() for k, v in tensors.items()}, meta))

    first, rest = FrameList(), FrameList()
    grid = checkpoint_grid(pipeline.schedule, 8)
    stats = render(pipeline, [first], checkpoints=grid, on_checkpoint=keep, should_stop=lambda: len(saved) == 2)
    assert stats.stopped
    point = RenderCheckpoint.from_tensors(*saved[1])  # the second: the audio before the resumed clip is released
    resumed = render(_pipeline(), [rest], resume=point)
    assert resumed.resumed_from == point.frames > 0
    return whole.video(), np.concatenate([first.video()[: point.frames], rest.video()])


def test_each_clip_is_conditioned_on_the_source_frame_at_its_start():
    pipeline, source = _pipeline(), _Source()
    dubbed, still = FrameList(), FrameList()
    first = source.frame(0)
    pipeline.render(first, [SPEECH], [dubbed], run=RenderRun(inputs=RenderInputs(video=source)))
    # wan_tiny's clips start every 8 frames (13 frames, 5 of them the last clip's): the reference's audio_start_idx
    assert source.asked[1:] == [8, 16, 24, 32]  # frame 0 is the reference itself; each later one read once, in order
    pipeline.render(first, [SPEECH], [still])  # the same first frame as an image
    assert np.array_equal(dubbed.video()[:13], still.video()[:13])  # the first clip is the image's
    assert np.abs(dubbed.video()[13:].astype(int) - still.video()[13:]).mean() > 1.0  # later clips follow the source


def test_a_stopped_dub_resumes_with_the_uninterrupted_frames():
    def render(pipeline, sinks, **options):
        source = _Source()
        inputs = RenderInputs(video=source, track_stats=lambda: (TrackStats.of(SPEECH),))  # a file: whole-file features
        return pipeline.render(source.frame(0), [SPEECH], sinks, run=RenderRun(inputs=inputs, **options))

    whole, joined = _stop_and_resume(render, _pipeline())
    assert whole.shape == (38, 64, 64, 3) and np.array_equal(joined, whole)


@pytest.fixture(scope="module")
def two_tracks() -> np.ndarray:
    right = np.sin(np.arange(24000) / 6).astype(np.float32) * (np.arange(24000) > 12000)
    return np.stack([SPEECH, right], axis=1)  # (n, 2): the left speaker, then the right one joins


def test_two_speakers_are_rendered_with_their_regions_and_resume_with_the_uninterrupted_frames(two_tracks):
    reference = _Source().frame(20)
    regions = ((0.0, 0.0, 32.0, 64.0), (32.0, 0.0, 64.0, 64.0))

    def render(pipeline, sinks, tracks=two_tracks, **options):
        totals = (TrackStats.of(tracks[:, 0]), TrackStats.of(tracks[:, 1]))
        inputs = RenderInputs(tracks=2, regions=regions, track_stats=lambda: totals)
        return pipeline.render(reference, [tracks[i : i + 4000] for i in range(0, len(tracks), 4000)], sinks,
                               run=RenderRun(inputs=inputs, **options))  # fmt: skip

    whole, joined = _stop_and_resume(render, _pipeline())
    assert whole.shape == (38, 64, 64, 3) and np.array_equal(joined, whole)
    swapped = FrameList()
    render(_pipeline(), [swapped], tracks=two_tracks[:, ::-1].copy())
    assert np.abs(swapped.video().astype(int) - whole).mean() > 0.5  # which speaker speaks where matters
