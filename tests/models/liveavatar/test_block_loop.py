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


def test_the_motion_latents_and_the_decoders_past_are_the_references(chunks, picture) -> None:
    """The reference encodes its 5-frame reference tensor repeated 73 times (365 frames, 92 latents), packs the last
    19 and decodes all 92 before its first clip; the port encodes fewer frames and decodes fewer latents: the same 19
    latents and the same decoder, to float rounding (bit for bit on one thread). Encoding 73 frames, as the port did,
    was 0.52 off in those latents and 0.33 in the frames after them."""
    from avatargen.families.liveavatar.chunks import motion_latents
    from avatargen.families.wan.framing import pixels_to_unit_range

    block = torch.randn(1, 16, 3, 4, 4, generator=torch.Generator().manual_seed(1))  # a block's latents
    with torch.inference_mode(), chunks.models.vae.active() as vae:
        image = pixels_to_unit_range(picture[:32, :32], chunks.device)  # (1, 3, 1, 32, 32): 365 frames quickly
        theirs = vae.encode(image.repeat(1, 1, 5, 1, 1).repeat(1, 1, 73, 1, 1))[0]  # (1, 16, 92, 4, 4)
        ours, stream = motion_latents(vae, image, decode=True)
        after_theirs = vae.decode(torch.cat([theirs, block], dim=2))[0][:, :, -12:]
        after_ours = vae.decode(block, stream)[0]
    assert theirs.shape[2] == 92
    assert (ours[:, :, -19:] - theirs[:, :, -19:]).abs().max() <= 1e-6
    assert (after_ours - after_theirs).abs().max() <= 1e-5


def test_the_reference_offset_is_seeded_and_in_the_references_range() -> None:
    """Seeded: a fresh interpreter (another hash seed) draws the same offsets, another seed other ones. In the
    reference's range: every value the reference's randint(4, 30) drew in its recording, and none other."""
    import json
    import os
    import subprocess
    import sys

    from safetensors.torch import load_file

    from tests.conftest import REPO
    from tests.models.liveavatar.test_reference_parity import FIXTURE

    draws = [reference_offset(7, block, step) for block in range(50) for step in range(4)]
    code = ("import json; from avatargen.families.liveavatar.chunks import reference_offset; "
            "print(json.dumps([reference_offset(7, b, s) for b in range(50) for s in range(4)]))")  # fmt: skip
    fresh = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True,
                           env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONHASHSEED": "12345"})  # fmt: skip
    assert json.loads(fresh.stdout) == draws
    assert draws != [reference_offset(8, block, step) for block in range(50) for step in range(4)]
    recorded = {int(v) for name, t in load_file(str(FIXTURE)).items() if name.endswith(".offsets") for v in t}
    assert recorded <= set(range(4, 31)) and len(recorded) > 10  # what the reference itself drew
    assert set(draws) == set(range(4, 31))  # 200 draws: every value of the reference's range, nothing outside it
