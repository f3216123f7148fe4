"""runtime.quantize: int8 linear layers only where ``int8`` asks for them (``auto`` keeps them float, whatever a
timing says); int8 frames within the measured tolerance of float linear layers (docs/performance.md, "Speed per CPU
class")."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf
import torch
from torch import nn

import avatargen.runtime.quantize as quantize
from avatargen.config.loader import load_config, to_config
from avatargen.errors import ConfigError
from avatargen.families.tiny.build import build_modules
from avatargen.io.audio import AudioFileSource
from avatargen.io.image import load_reference_image
from tests.conftest import engine_of
from avatargen.pipeline.build import pipeline_for
from avatargen.runtime.quantize import Int8Linear, choose_quantization, engine_for_this_cpu
from tests.conftest import FrameList, REPO, run_cli

CPU = torch.device("cpu")
needs_engine = pytest.mark.skipif(engine_for_this_cpu() is None, reason="this torch has no quantized CPU engine")

# int8 against float linear layers, the model's own 256 x 256 square (docs/performance.md): PSNR ~43 dB, mean
# |diff| ~1.3 grey levels; bf16 against float32: 57 dB.
MIN_PSNR_DB = 38.0
MAX_MEAN_ABS_GREY = 2.5


def test_auto_keeps_float_linear_layers_without_timing_anything(monkeypatch) -> None:
    # a timed probe used to decide: its verdict flipped on a busy CPU and the same command made two videos
    monkeypatch.setattr(quantize, "probe_int8_speedup", lambda engine: pytest.fail("a render's choice was timed"))
    chosen = choose_quantization("auto", CPU, torch.float32, single_process=True, resident=True)
    assert not chosen.int8 and "runtime.quantize=int8" in chosen.reason
    assert not choose_quantization("none", CPU, torch.float32, True, True).int8


@pytest.mark.parametrize("dtype, single, resident, why", [
    (torch.bfloat16, True, True, "bfloat16 compute"),
    (torch.float32, False, True, "one process"),
    (torch.float32, True, False, "resident"),
])  # fmt: skip
def test_int8_where_it_does_not_run_says_why(dtype, single, resident, why) -> None:
    with pytest.raises(ConfigError, match=f"runtime.quantize=int8 cannot run here.*{why}.*runtime.quantize=auto or none"):
        choose_quantization("int8", CPU, dtype, single_process=single, resident=resident)


@needs_engine
def test_an_int8_layer_gives_the_float_layers_output_within_its_rounding() -> None:
    torch.manual_seed(0)
    layer = nn.Linear(192, 768)
    x = torch.randn(3, 64, 192)  # (B, L, in)
    with torch.inference_mode():
        exact, int8 = layer(x), Int8Linear(layer)(x)
    assert int8.shape == exact.shape and int8.dtype == torch.float32
    error = (int8 - exact).abs().mean() / exact.abs().mean()
    assert 0 < error < 0.02  # 7-bit inputs, 8-bit weights: ~1 % of the output's size


def _frames(quantize_setting: str, audio) -> np.ndarray:
    torch.set_num_threads(1)
    config = to_config(load_config(["runtime.dtype=float32", f"runtime.quantize={quantize_setting}"]))
    models = build_modules(config, CPU)
    assert models.precision.quantization.int8 is (quantize_setting == "int8")
    pipeline = pipeline_for(config, models, engine_of(config))
    reference = load_reference_image(REPO / "examples" / "avatar_1.png", config.model.image_size)
    sink, source = FrameList(), AudioFileSource(audio, config.model.sample_rate)
    pipeline.render(reference, source, [sink])
    source.close()
    return np.concatenate(sink.parts).astype(np.float64)  # (T, H, W, 3)


@needs_engine
def test_an_int8_render_stays_within_tolerance_of_float_linear_layers(tmp_path) -> None:
    wave, rate = sf.read(REPO / "examples" / "speech_1.flac", dtype="float32")
    audio = tmp_path / "speech.wav"
    sf.write(audio, wave[:rate], rate)  # N chunk 0 and the first segment in float, the rest in int8
    exact, int8 = _frames("none", audio), _frames("int8", audio)
    # The first segment (N chunk 0's frames before the first seam) is the float render's: the first frame's path.
    np.testing.assert_array_equal(int8[:12], exact[:12])
    diff = np.abs(int8[12:] - exact[12:])
    assert diff.max() > 0, "runtime.quantize=int8 changed nothing: the linear layers did not run in int8"
    psnr = 10 * np.log10(255.0**2 / np.mean(diff**2))
    assert psnr >= MIN_PSNR_DB and diff.mean() <= MAX_MEAN_ABS_GREY, f"int8 vs float: {psnr:.1f} dB, {diff.mean():.2f} grey"


def test_int8_on_a_bfloat16_render_is_refused_in_one_line(tmp_path) -> None:
    result = run_cli("render", "-i", str(REPO / "examples" / "avatar_1.png"), "-a", str(REPO / "examples" / "speech_1.flac"),
                     "-o", str(tmp_path / "out.mp4"), "model.weights=random", "runtime.device=cpu", "runtime.dtype=bfloat16",
                     "runtime.quantize=int8")  # fmt: skip
    assert result.returncode == 2, result.stderr
    # the random weights' note, and on a machine without dlib the centre-crop warning, are not errors
    errors = [line for line in result.stderr.splitlines() if not line.startswith(("note:", "warning:"))]
    assert len(errors) == 1 and "runtime.quantize=int8" in errors[0] and "Traceback" not in result.stderr
    assert not list(tmp_path.iterdir())  # nothing left under the output's name
