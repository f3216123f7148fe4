"""Fuzzing the input decoders and the override parser: random or mutated input may only ever fail with the
documented errors (BadInputError, ConfigError), never with anything else."""

from __future__ import annotations

import io
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from avatargen.config.loader import load_config, to_config
from avatargen.errors import BadInputError, ConfigError
from avatargen.io.audio import AudioFileSource
from avatargen.io.image import load_reference_image

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _valid_wav() -> bytes:
    buffer = io.BytesIO()
    t = np.arange(4000) / 8000
    sf.write(buffer, (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 8000, format="WAV")
    return buffer.getvalue()


def _valid_png() -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (48, 40, 3), dtype=np.uint8)).save(buffer, "PNG")
    return buffer.getvalue()


WAV, PNG = _valid_wav(), _valid_png()


def mutated(valid: bytes) -> st.SearchStrategy[bytes]:
    """Random bytes, or a valid file with a few bytes overwritten and/or cut short."""
    edits = st.lists(st.tuples(st.integers(0, len(valid) - 1), st.integers(0, 255)), max_size=8)
    cut = st.integers(0, len(valid))

    def apply(args: tuple[list[tuple[int, int]], int]) -> bytes:
        data = bytearray(valid)
        for position, value in args[0]:
            data[position] = value
        return bytes(data[: args[1]])

    return st.one_of(st.binary(max_size=2000), st.tuples(edits, cut).map(apply))


def _write(data: bytes, suffix: str) -> Path:
    file = tempfile.NamedTemporaryFile(suffix=suffix, delete=False)
    file.write(data)
    file.close()
    return Path(file.name)


@FUZZ
@given(mutated(WAV))
def test_audio_decoding_fails_only_with_bad_input_error(data):
    path = _write(data, ".wav")
    try:
        with AudioFileSource(path, 16000, block_samples=4000) as source:
            blocks = list(source)
        assert all(block.dtype == np.float32 and np.isfinite(block).all() for block in blocks)
    except BadInputError as error:
        assert "\n" not in str(error)
    finally:
        path.unlink()


@FUZZ
@given(mutated(PNG))
def test_image_decoding_fails_only_with_bad_input_error(data):
    path = _write(data, ".png")
    try:
        rgb = load_reference_image(path, 64)
        assert rgb.shape == (64, 64, 3) and rgb.dtype == np.uint8
    except BadInputError as error:
        assert "\n" not in str(error)
    finally:
        path.unlink()


KEYS = ["seed", "model", "pipeline", "pipeline.n_chunk_frames", "pipeline.image_fit", "pipeline.interpolate",
        "output.crf", "output.gop_seconds", "runtime.device", "runtime.threads", "model.vae.widths", "+extra.key",
        "pipeline.sampling_shift", "nope", "model.a2v.depth"]  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.sampled_from(KEYS), st.text(max_size=12)),
                          st.one_of(st.text(max_size=12), st.integers().map(str), st.sampled_from(["[1,2]", "null", "-1", "1e9", "{a: 1}"]))),
                max_size=3))  # fmt: skip
def test_config_overrides_fail_only_with_config_error(pairs):
    overrides = [f"{key}={value}" for key, value in pairs]
    try:
        to_config(load_config(overrides))
    except (ConfigError, BadInputError) as error:
        assert str(error)
