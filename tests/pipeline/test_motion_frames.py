"""Boundary-frame conditioning (pipeline.motion_frames), on by default: each N chunk after the first starts from the
last frames of the previous one, so the chunks continue each other rather than only meeting at the I chunks."""

from __future__ import annotations

import torch

from avatargen.config.loader import load_config, to_config
from avatargen.families.tiny.config import motion_frames_for
from avatargen.io.audio import AudioFileSource
from avatargen.io.image import load_reference_image
from avatargen.families.tiny.build import build_modules
from tests.conftest import engine_of
from avatargen.pipeline.build import pipeline_for
from avatargen.pipeline.schedule import NChunk
from tests.conftest import FrameList, REPO, write_speechlike_wav

CPU = torch.device("cpu")
DEFAULT_MOTION_FRAMES = 2  # docs/model-card.md, "Boundary-frame conditioning"


def test_the_default_schedule_conditions_each_n_chunk_on_the_previous_chunks_last_frames():
    config = to_config(load_config())
    schedule = pipeline_for(config, build_modules(config, CPU), engine_of(config)).schedule
    assert schedule.motion_frames == DEFAULT_MOTION_FRAMES
    chunks = [s for s in schedule.steps(schedule.spans(100)) if isinstance(s, NChunk)]
    assert chunks[0].window == (0, 16)  # the first chunk has no past
    for previous, chunk in zip(chunks, chunks[1:]):
        assert chunk.window == (previous.end - DEFAULT_MOTION_FRAMES, chunk.end)


def test_the_model_square_gets_no_motion_frames_unless_asked():
    """Null (the default) is 2 where the video is composited, 0 where it is the model's own square, which drifts."""
    config = to_config(load_config())
    assert config.pipeline.motion_frames is None
    assert motion_frames_for(config, composited=True) == DEFAULT_MOTION_FRAMES
    assert motion_frames_for(config, composited=False) == 0  # no face found
    assert motion_frames_for(to_config(load_config(["pipeline.composite=false"]))) == 0
    assert motion_frames_for(to_config(load_config(["pipeline.motion_frames=4"])), composited=False) == 4



def test_a_default_render_gives_each_n_chunk_the_previous_chunks_own_last_latents(tmp_path):
    """The given frames of N1's window are N0's generated latents, unchanged, and N1 keeps them as they were."""
    torch.set_num_threads(1)
    audio = write_speechlike_wav(tmp_path / "speech.wav", 1.4, rate=16000)  # 35 frames: N0, N1, N2 and two seams
    config = to_config(load_config(["model.weights=random", "runtime.quantize=none"]))  # one A2V stage for all chunks
    pipeline = pipeline_for(config, build_modules(config, CPU), engine_of(config))
    calls: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []  # (given, given_mask, output) per A2V window
    generate = pipeline.steps.a2v.generate

    def recording(reference, features, given, given_mask, noise, steps):
        out = generate(reference, features, given, given_mask, noise, steps)
        calls.append((given.clone(), given_mask.clone(), out.clone()))
        return out

    pipeline.steps.a2v.generate = recording
    reference = load_reference_image(REPO / "examples" / "avatar_1.png", config.model.image_size)
    sink = FrameList()
    pipeline.render(reference, AudioFileSource(audio, config.model.sample_rate), [sink])
    assert sum(p.shape[0] for p in sink.parts) == 35

    (_, n0_mask, n0), (n1_given, n1_mask, n1) = calls[0], calls[1]  # execution order N0, N1, I0, N2, I1
    m = DEFAULT_MOTION_FRAMES
    assert not n0_mask.any() and n0.shape[2] == 16
    assert n1.shape[2] == 16 + m and n1_mask[0].tolist() == [True] * m + [False] * 16
    assert torch.equal(n1_given[:, :, :m], n0[:, :, -m:]), "N1 is not given N0's last frames"
    assert torch.equal(n1[:, :, :m], n0[:, :, -m:]), "N1 changed the frames it was given"
