"""A picture rendered before is not encoded again: its reference conditioning comes from the cache folder, bit for
bit what encoding it gives, and any change to what it depends on (prompt, weights, threads) encodes it again; a
damaged or unwritable cache costs only the encode (avatargen/stages/reference_cache.py)."""

from __future__ import annotations

import os

import pytest
import torch

from avatargen.config.loader import load_config, to_config
from avatargen.families.tiny.stages.context import ContextGenStage
from avatargen.io.image import load_reference
from tests.conftest import engine_of
from avatargen.pipeline.build import place_models
from avatargen.runtime.distributed import ParallelContext, world_info
from avatargen.stages import reference_cache
from avatargen.stages.reference_cache import references_folder
from tests.pipeline.golden_frames import REPO, md5s, render_frames


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return references_folder()


@pytest.fixture
def context():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    config = to_config(load_config(["runtime.dtype=float32"]))
    models = place_models(config, engine_of(config), torch.device("cpu"), ParallelContext(world_info()))
    model = config.model
    stage = ContextGenStage(models.audio_encoder, models.text_encoder, models.vae, config.seed, model.text_encoder.max_tokens,
                            (model.vae, model.text_encoder, model.image_size))  # fmt: skip
    square = load_reference(REPO / "examples" / "avatar_2.png", model.image_size, "crop").square
    yield stage, square
    torch.set_num_threads(threads)


def _counted(stage: ContextGenStage, monkeypatch) -> list[str]:
    """The prompts ``stage`` encodes from here on (its cache hits are not counted)."""
    encoded: list[str] = []
    encode = stage._encode_reference
    monkeypatch.setattr(stage, "_encode_reference", lambda rgb, prompt: encoded.append(prompt) or encode(rgb, prompt))
    return encoded


def _same(a, b) -> bool:
    return all(torch.equal(getattr(a, name), getattr(b, name)) for name in ("ref_low", "ref_high", "text"))


def test_a_picture_encoded_before_is_read_back_bit_for_bit_and_a_new_prompt_or_thread_count_is_encoded(cache, context, monkeypatch):
    stage, square = context
    computed = stage._encode_reference(square, "a calm voice")
    encoded = _counted(stage, monkeypatch)
    first = stage.encode_reference(square, "a calm voice")
    again = stage.encode_reference(square, "a calm voice")
    assert encoded == ["a calm voice"] and len(list(cache.glob("*.safetensors"))) == 1
    assert _same(again, computed) and _same(first, computed)
    stage.encode_reference(square, "a loud voice")
    torch.set_num_threads(2)  # float sums may round otherwise
    stage.encode_reference(square, "a calm voice")
    stage.encode_reference(square[::-1].copy(), "a calm voice")
    assert encoded == ["a calm voice", "a loud voice", "a calm voice", "a calm voice"]
    assert len(list(cache.glob("*.safetensors"))) == 4


def test_other_weights_are_encoded_again(cache, context, monkeypatch):
    stage, square = context
    encoded = _counted(stage, monkeypatch)
    stage.encode_reference(square, "")
    monkeypatch.setattr(stage.vae, "_weights_digest", "0" * 64)  # a fine-tuned VAE
    stage.encode_reference(square, "")
    assert encoded == ["", ""]


def test_a_damaged_entry_is_encoded_again_and_rewritten(cache, context, monkeypatch):
    stage, square = context
    first = stage.encode_reference(square, "")
    (path,) = cache.glob("*.safetensors")
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x40  # one bit of the last tensor's bytes: still a safetensors file, no longer what was kept
    path.write_bytes(bytes(data))
    encoded = _counted(stage, monkeypatch)
    assert _same(stage.encode_reference(square, ""), first)
    assert encoded == [""]
    stage.encode_reference(square, "")
    assert encoded == [""]  # rewritten whole
    path.write_bytes(b"cut short")
    assert _same(stage.encode_reference(square, ""), first) and encoded == ["", ""]


def test_an_unwritable_cache_folder_only_costs_the_encode(tmp_path, context, monkeypatch):
    stage, square = context
    blocked = tmp_path / "not_a_folder"
    blocked.write_text("a file where the cache folder would go")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    assert _same(stage.encode_reference(square, ""), stage._encode_reference(square, ""))


def test_past_max_entries_the_least_recently_used_is_dropped(cache, context, monkeypatch):
    stage, square = context
    monkeypatch.setattr(reference_cache, "MAX_ENTRIES", 2)
    stage.encode_reference(square, "first")
    (first,) = cache.glob("*.safetensors")
    stage.encode_reference(square, "second")
    (second,) = set(cache.glob("*.safetensors")) - {first}
    os.utime(first, ns=(10**9, 10**9))  # the first is the least recently used ...
    os.utime(second, ns=(2 * 10**9, 2 * 10**9))
    stage.encode_reference(square, "first")  # ... until it is read again
    stage.encode_reference(square, "third")
    assert first.exists() and not second.exists() and len(list(cache.glob("*.safetensors"))) == 2
    encoded = _counted(stage, monkeypatch)
    stage.encode_reference(square, "first")
    stage.encode_reference(square, "third")
    stage.encode_reference(square, "second")
    assert encoded == ["second"]


def test_a_render_from_the_cache_has_the_frames_of_one_that_encodes(cache):
    encoded = md5s(render_frames("tiny_avatar_3"))
    assert len(list(cache.glob("*.safetensors"))) == 1
    assert md5s(render_frames("tiny_avatar_3")) == encoded
