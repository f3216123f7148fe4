"""LiveAvatar's block loop in one process (``model=liveavatar_tiny``): blocks stream one at a time, the KV rings keep
their size however many blocks ran, and a render restored from a block's resume point (rings + decoder past) goes on
with exactly the frames of an unstopped one."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from avatargen.config.loader import load_config, to_config
from avatargen.families.liveavatar.chunks import LiveAvatarChunks, reference_offset
from tests.conftest import engine_of
from avatargen.pipeline.build import place_models
from avatargen.pipeline.schedule import NChunk
from avatargen.pipeline.state import RollingState
from avatargen.pipeline.stats import RenderStats
from avatargen.runtime.distributed import ParallelContext, world_info


class Tone:
    """An AudioTimeline stand-in: a 25 fps, 16 kHz amplitude-modulated tone (zeros before 0)."""

    def samples(self, start: int, end: int) -> np.ndarray:
        t = np.arange(start * 640, end * 640) / 16000
        return (0.3 * np.sin(2 * np.pi * 220 * t) * (1 + np.sin(2 * np.pi * 3 * t)) * (t >= 0)).astype(np.float32)


@pytest.fixture(scope="module")
def chunks() -> LiveAvatarChunks:
    config = to_config(load_config(["model=liveavatar_tiny", "runtime.threads=1"]))
    models = place_models(config, engine_of(config), torch.device("cpu"), ParallelContext(world_info()))
    return LiveAvatarChunks(config, models)


@pytest.fixture(scope="module")
def picture() -> np.ndarray:
    return (np.random.default_rng(0).random((64, 64, 3)) * 255).astype(np.uint8)


def _blocks(run, first: int, count: int) -> list[np.ndarray]:
    state, frames = RollingState(), []
    for b in range(first, first + count):
        run.n_chunk(NChunk(b, b * 12, b * 12 + 12, b * 12), Tone(), state)
        segment = run.hand_over(SimpleNamespace(index=b, start=b * 12, end=b * 12 + 12), state)
        assert not state.n_windows  # nothing of a block stays behind once it left
        frames += list(run.frames(segment, None))
    return frames


def test_a_resumed_block_loop_gives_the_frames_of_an_unstopped_one(chunks, picture) -> None:
    """Block 2 rolls the two-block ring; the resume point after block 1 holds the rings and the decoder's past."""
    whole, sizes = [], []
    run = chunks.start(picture, "a person talking", RenderStats(), None)
    for b in range(3):
        whole += _blocks(run, b, 1)
        sizes.append(sum(t.numel() for t in run.save()[0].values()))
        if b == 1:
            tensors, meta = run.save()
    assert len(set(sizes)) == 1, f"the resume state grew: {sizes}"  # the rings roll; nothing grows
    assert run.rings[0].layers[0].k.shape[1] == (24 // 4) * 16  # clip_frames=24: 6 latent frames of 4x4 tokens
    resumed = chunks.start(picture, "a person talking", RenderStats(), None)
    resumed.restore(tensors, meta)
    tail = _blocks(resumed, 2, 1)
    assert [f.shape for f in whole] == [(12, 64, 64, 3)] * 3
    assert np.array_equal(tail[0], whole[2]), "the resumed block differs from the unstopped one"
    assert not np.array_equal(whole[0], whole[1])  # the blocks are not one frame repeated


def test_the_reference_offset_is_seeded_and_in_the_references_range() -> None:
    draws = [reference_offset(7, block, step) for block in range(50) for step in range(4)]
    assert draws == [reference_offset(7, block, step) for block in range(50) for step in range(4)]
    assert min(draws) >= 4 and max(draws) <= 30 and len(set(draws)) > 10
    assert draws != [reference_offset(8, block, step) for block in range(50) for step in range(4)]
