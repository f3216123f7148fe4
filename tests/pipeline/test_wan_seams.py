"""`model=wan_tiny` with I chunks (`pipeline.interpolate=true`): each seam between two clips is regenerated from the
frames shown before it and the next clip's latents after it, through the one VAE decode stream."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from avatargen.config.loader import load_config, to_config
from avatargen.pipeline.checkpoint import RenderCheckpoint
from avatargen.pipeline.schedule import checkpoint_grid
from tests.conftest import engine_of
from avatargen.pipeline.build import pipeline_for, place_models
from avatargen.pipeline.pipeline import Pipeline
from avatargen.runtime.distributed import ParallelContext, world_info
from tests.conftest import FrameList
from avatargen.pipeline.run import RenderRun

AUDIO = [np.sin(np.arange(int(16000 * 1.5)) / 10).astype(np.float32)]  # 1.5 s = 38 frames: clips end at 13, 21, ...


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    image = np.zeros((64, 64, 3), dtype=np.uint8)
    image[:], image[8:40, 20:52] = (200, 90, 60), (40, 160, 210)
    return image


def _pipeline(interpolate: bool) -> Pipeline:
    torch.set_num_threads(1)
    config = to_config(load_config(["model=wan_tiny", "model.wan.sampling_steps=2", f"pipeline.interpolate={str(interpolate).lower()}"]))
    return pipeline_for(config, place_models(config, engine_of(config), torch.device("cpu"), ParallelContext(world_info())), engine_of(config))


def test_seams_are_regenerated_and_the_frames_before_the_first_seam_are_unchanged(reference):
    videos, stats = {}, {}
    for interpolate in (False, True):
        sink = FrameList()
        stats[interpolate] = _pipeline(interpolate).render(reference, AUDIO, [sink], run=RenderRun(record_seams=True))
        videos[interpolate] = sink.video()
    assert videos[True].shape == videos[False].shape == (38, 64, 64, 3)
    assert (stats[True].n_chunks, stats[True].i_chunks) == (5, 4) and stats[False].i_chunks == 0
    # The first seam is frames 9-16 (4 each side of the boundary at 13): everything before it is the same decode.
    assert stats[True].seams[0] == 9
    assert np.array_equal(videos[True][:9], videos[False][:9])
    difference = np.abs(videos[True][9:17].astype(int) - videos[False][9:17]).mean(axis=(1, 2, 3))  # per frame
    assert difference.mean() > 2.0  # the seam is the I chunk's, not the clips' own frames


def test_a_stopped_render_resumes_with_the_uninterrupted_frames(reference):
    whole = FrameList()
    pipeline = _pipeline(True)
    pipeline.render(reference, AUDIO, [whole])
    grid = checkpoint_grid(pipeline.schedule, 8)
    saved = []

    def keep(point: RenderCheckpoint) -> None:  # through the files' format: tensors + JSON metadata
        tensors, meta = point.to_tensors()
        saved.append(({k: v.clone() for k, v in tensors.items()}, meta))

    first = FrameList()
    stats = pipeline.render(reference, AUDIO, [first], run=RenderRun(checkpoints=grid, on_checkpoint=keep, should_stop=lambda: bool(saved)))
    assert stats.stopped and len(saved) == 1
    point = RenderCheckpoint.from_tensors(*saved[0])
    assert point.frames == 9 and "shown" in point.family_state[0]  # after the first clip's frames up to its seam
    rest = FrameList()
    resumed = _pipeline(True).render(reference, AUDIO, [rest], run=RenderRun(resume=point))
    assert resumed.resumed_from == 9 and resumed.i_chunks == 4
    joined = np.concatenate([first.video()[:9], rest.video()])
    assert np.array_equal(joined, whole.video())
