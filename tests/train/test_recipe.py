"""The training recipe runs end to end and is deterministic for a seed (slow: it trains, so not in CI)."""

from __future__ import annotations

import pytest
from safetensors.torch import load_file

from avatargen.train.recipe import load_recipe, run_recipe

TINY = ["vae_steps=4", "audio_steps=4", "clips=3", "clip_seconds=2", "a2v_steps=4", "sr_steps=4", "log_every=2", "threads=1"]


@pytest.mark.slow
def test_same_seed_gives_the_same_weights(tmp_path):
    for run in ("a", "b"):
        run_recipe(load_recipe(TINY), tmp_path / run)
    for name in ("audio_encoder", "text_encoder", "vae", "a2v", "sr"):
        a, b = (load_file(str(tmp_path / run / f"{name}.safetensors")) for run in ("a", "b"))
        assert a.keys() == b.keys()
        for key in a:
            assert (a[key] == b[key]).all(), f"{name}.{key} differs between two runs with the same seed"
