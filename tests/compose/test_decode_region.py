"""Under reference compositing only the mouth region of the model's frames is decoded: the video is the one a whole
decode gives, at a fifth of the decoder's work."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf
import torch

from avatargen.compose.composite import ReferenceCompositor
from avatargen.config.loader import load_config, to_config
from avatargen.errors import ResumeMismatchError
from avatargen.io.audio import AudioFileSource
from avatargen.io.image import load_reference
from avatargen.families.tiny.models.vae import DecoderCache
from avatargen.families.tiny.build import build_modules
from tests.conftest import engine_of
from avatargen.pipeline.build import pipeline_for
from avatargen.render import compositor_for
from avatargen.families.tiny.stages.decode import DecodeRegion, StreamingDecodeStage
from tests.conftest import FrameList, REPO
from avatargen.pipeline.run import RenderRun

CPU = torch.device("cpu")



@pytest.fixture(scope="module")
def pictures(tmp_path_factory) -> dict[str, object]:
    from PIL import Image

    from tests.eval import clips

    photo = tmp_path_factory.mktemp("photo") / "astronaut.png"
    Image.fromarray(clips.astronaut()).save(photo)
    return {"avatar": REPO / "examples" / "avatar_1.png", "photo": photo}


def _compositor(path, mouth: str) -> ReferenceCompositor:
    """As a render builds it (``render.compositor_for``), idle motion off."""
    config = to_config(load_config([f"pipeline.mouth={mouth}", "pipeline.idle_motion.head_motion=false",
                                    "pipeline.idle_motion.blinks_per_minute=0"]))  # fmt: skip
    return compositor_for(load_reference(path, config.model.image_size, config.pipeline.image_fit.value), config)


@pytest.mark.parametrize("reference, mouth", [("avatar", "blend"), ("avatar", "warp"), ("photo", "warp")])
def test_compose_reads_nothing_of_the_model_frame_outside_its_box(pictures, reference, mouth) -> None:
    compositor = _compositor(pictures[reference], mouth)
    y0, y1, x0, x1 = compositor.model_box()
    rng = np.random.default_rng(0)
    generated = rng.integers(0, 256, (3, 256, 256, 3), dtype=np.uint8)
    generated[1] = 200  # a shut, skin-coloured mouth next to two noisy (wide open) ones
    only_box = np.zeros_like(generated)
    only_box[:, y0:y1, x0:x1] = generated[:, y0:y1, x0:x1]
    np.testing.assert_array_equal(compositor.compose(only_box, 0), compositor.compose(generated, 0))
    assert (y1 - y0) * (x1 - x0) < 0.1 * 256 * 256  # the mouth and jaw: a small part of the frame


def test_a_decode_region_covers_the_box_with_its_margin_inside_the_grid() -> None:
    region = DecodeRegion.around((121, 188, 85, 172), factor=8, latent_size=32, margin=4)
    assert (region.top, region.bottom, region.left, region.right) == (11, 28, 6, 26)
    edge = DecodeRegion.around((0, 20, 250, 256), factor=8, latent_size=32, margin=4)
    assert (edge.top, edge.bottom, edge.left, edge.right) == (0, 7, 27, 32)
    # A micro-batch holds as many pixels as 4 whole frames: 12 frames of a 17 x 20 region of the 32 x 32 grid.
    assert region.frames_like(4) == 12 and edge.frames_like(4) == 16


def test_a_resume_point_decoded_over_another_region_is_refused() -> None:
    stage = StreamingDecodeStage(vae=None, region=DecodeRegion(11, 28, 6, 26, factor=8, latent_size=32))
    whole_frame = DecoderCache(frames=[torch.zeros(1, 96, 2, 32, 32), torch.zeros(1, 96, 2, 32, 32)])
    with pytest.raises(ResumeMismatchError, match="without --resume"):
        stage.resume_from(whole_frame, latent_size=32)
    cropped = DecoderCache(frames=[torch.zeros(1, 96, 2, 17, 20), torch.zeros(1, 96, 2, 17, 20)])
    stage.resume_from(cropped, latent_size=32)
    assert stage.cache is cropped


def test_the_composited_video_is_the_whole_decodes_within_rounding(tmp_path) -> None:
    torch.set_num_threads(1)
    wave, rate = sf.read(REPO / "examples" / "speech_1.flac", dtype="float32")
    audio = tmp_path / "speech.wav"
    sf.write(audio, wave[: rate], rate)
    # fp32: on a CPU with native bf16 the default picks bf16, whose rounding between layers differs between the two
    # decodes' shapes by more than a grey level (3 levels after the colour match's gain, in a few pixels).
    config = to_config(load_config(["runtime.dtype=float32"]))
    pipeline = pipeline_for(config, build_modules(config, CPU), engine_of(config))
    loaded = load_reference(REPO / "examples" / "avatar_1.png", config.model.image_size, config.pipeline.image_fit.value)
    compositor = compositor_for(loaded, config)  # as a render builds it (a cartoon: the warped mouth)

    def model_frames(read_box) -> np.ndarray:
        sink, source = FrameList(), AudioFileSource(audio, config.model.sample_rate)
        pipeline.render(loaded.square, source, [sink], run=RenderRun(read_box=read_box))
        source.close()
        return np.concatenate(sink.parts)  # (T, S, S, 3)

    box = compositor.model_box()
    whole, cropped = model_frames(None), model_frames(box)
    region = DecodeRegion.around(box, factor=8, latent_size=32)
    f = region.factor
    assert not cropped[:, : region.top * f].any() and not cropped[:, region.bottom * f :].any()  # not decoded
    y0, y1, x0, x1 = box
    read = np.abs(whole[:, y0:y1, x0:x1].astype(int) - cropped[:, y0:y1, x0:x1].astype(int))
    assert read.max() <= 1 and read.mean() < 0.05, (read.max(), read.mean())  # a rounding step at most
    # A rounding step in the model's mouth moves the opening it reads by a hair, and the resampled lip edge by up to
    # 4 grey levels in a few pixels (the blend: its colour match's gain, up to 2x, makes a step two levels).
    diff = np.abs(compositor.compose(whole, 0).astype(int) - compositor.compose(cropped, 0).astype(int))
    assert diff.max() <= 4 and diff.mean() < 0.01 and (diff > 2).sum() <= 12, (diff.max(), diff.mean(), (diff > 2).sum())
