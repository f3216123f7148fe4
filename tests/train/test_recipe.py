"""The training recipe runs end to end and is deterministic for a seed (slow: it trains, so not in CI)."""

from __future__ import annotations

import shutil

import pytest
import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file

from avatargen.errors import ConfigError
from avatargen.families.tiny.config import checkpoint_architecture
from avatargen.families.tiny.config import SHIPPED_CHECKPOINTS
from avatargen.families.tiny.models.vae import VAE, VAEParams
from avatargen.families.tiny.train.config import load_recipe
from avatargen.families.tiny.train.recipe import MODULES, run_recipe, save_module

TINY = ["vae_steps=4", "audio_steps=4", "clips=3", "clip_seconds=2", "a2v_steps=4", "a2v_distill_steps=2", "sr_steps=4",
        "log_every=2", "threads=1"]  # fmt: skip


@pytest.mark.slow
def test_same_seed_gives_the_same_weights(tmp_path):
    for run in ("a", "b"):
        run_recipe(load_recipe(TINY), tmp_path / run)
    for name in ("audio_encoder", "text_encoder", "vae", "a2v", "sr"):
        a, b = (load_file(str(tmp_path / run / f"{name}.safetensors")) for run in ("a", "b"))
        assert a.keys() == b.keys()
        for key in a:
            assert (a[key] == b[key]).all(), f"{name}.{key} differs between two runs with the same seed"


@pytest.mark.slow
def test_init_from_distils_only_the_a2v_of_a_checkpoint(tmp_path):
    run_recipe(load_recipe([*TINY, "a2v_distill_steps=0"]), tmp_path / "base")
    run_recipe(load_recipe([*TINY, f"init_from={tmp_path / 'base'}"]), tmp_path / "distilled")
    shipped = checkpoint_architecture(SHIPPED_CHECKPOINTS["tiny"])  # the model config's
    assert checkpoint_architecture(tmp_path / "base") == checkpoint_architecture(tmp_path / "distilled") == shipped
    for name in MODULES:
        base, distilled = (load_file(str(tmp_path / run / f"{name}.safetensors")) for run in ("base", "distilled"))
        same = all(torch.equal(base[key], distilled[key]) for key in base)
        assert same == (name != "a2v"), f"{name}: {'unchanged' if same else 'changed'}"
    with pytest.raises(ConfigError, match="already distilled"):
        run_recipe(load_recipe([*TINY, f"init_from={tmp_path / 'distilled'}"]), tmp_path / "twice")


def test_init_from_needs_a_checkpoint_folder_not_yet_distilled(tmp_path):
    with pytest.raises(ConfigError, match="no audio_encoder.safetensors"):
        run_recipe(load_recipe([f"init_from={tmp_path}"]), tmp_path / "out")
    folder = tmp_path / "shipped"
    shutil.copytree(SHIPPED_CHECKPOINTS["tiny"], folder)
    (folder / "recipe.yaml").write_text("a2v_distill_steps: 1000\n")
    with pytest.raises(ConfigError, match="already distilled"):
        run_recipe(load_recipe([f"init_from={folder}"]), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_checkpoint_folder_says_which_architecture_its_weights_were_trained_for(tmp_path):
    assert checkpoint_architecture(tmp_path) is None  # no model.yaml: nothing to check against
    (tmp_path / "model.yaml").write_text("a2v: {dim: 192}\nsr: {dim: 128}\n")  # from before the keys existed
    assert checkpoint_architecture(tmp_path) == {("a2v", "attention"): "full", ("vae", "decoder_widths"): None}
    assert checkpoint_architecture(SHIPPED_CHECKPOINTS["tiny"]) == {("a2v", "attention"): "axial",
                                                                   ("vae", "decoder_widths"): [48, 32, 16]}


def test_init_from_a_checkpoint_with_a_wider_decoder_trains_only_the_decoder(tmp_path):
    """A checkpoint whose model.yaml predates model.vae.decoder_widths (its decoder as wide as its encoder): the
    recipe with a2v_distill_steps=0 distils that decoder into the model config's narrower one and keeps everything
    else, the VAE's encoder and latent statistics included, bit for bit."""
    folder = tmp_path / "wide"
    shutil.copytree(SHIPPED_CHECKPOINTS["tiny"], folder)
    model = OmegaConf.load(folder / "model.yaml")
    del model.vae["decoder_widths"]
    OmegaConf.save(model, folder / "model.yaml")
    torch.manual_seed(0)
    wide = VAE(VAEParams(widths=list(model.vae.widths), decoder_widths=None))  # random weights: an older, wide decoder
    wide.latent_std.fill_(0.5)
    save_module(wide, folder / "vae.safetensors", torch.float16)
    summary = run_recipe(load_recipe([f"init_from={folder}", "a2v_distill_steps=0", "decoder_distill_steps=2",
                                      "vae_batch=2", "log_every=1", "threads=1"]), tmp_path / "out")  # fmt: skip
    assert set(summary["phases"]) == {"decoder_distill"}  # no latent cache, no A2V distillation
    assert checkpoint_architecture(tmp_path / "out") == checkpoint_architecture(SHIPPED_CHECKPOINTS["tiny"])
    before, after = (load_file(str(run / "vae.safetensors")) for run in (folder, tmp_path / "out"))
    narrow = VAE(VAEParams(widths=list(model.vae.widths), decoder_widths=[48, 32, 16])).state_dict()
    assert {key: value.shape for key, value in after.items()} == {key: value.shape for key, value in narrow.items()}
    for key in [key for key in after if not key.startswith("decoder.")]:
        assert torch.equal(after[key], before[key]), f"vae.{key} changed"
    for name in set(MODULES) - {"vae"}:
        a, b = (load_file(str(run / f"{name}.safetensors")) for run in (folder, tmp_path / "out"))
        assert all(torch.equal(a[key], b[key]) for key in a), f"{name} changed"


def test_the_teacher_attention_is_one_the_a2v_has():
    assert load_recipe([]).a2v_teacher_attention == "full"
    with pytest.raises(ConfigError, match="a2v_teacher_attention must be one of axial, full, got 'sparse'"):
        load_recipe(["a2v_teacher_attention=sparse"])


@pytest.mark.parametrize("override, says", [
    ("model=wan_tiny", "model=wan_tiny is of the 'wan' family; this recipe trains the bundled family's: model=tiny"),
    ("vae_batch=0", "vae_batch must be in [1, 4096], got 0"),
    ("threads=-3", "threads must be in [0, 1024] (0: torch's default), got -3"),
    ("seed=-1", "seed must be in [0, 92230952439944], got -1"),
    ("vae_lr=nan", "vae_lr must be a finite number, got nan"),
    ("a2v_lr=0", "a2v_lr must be in (0, 1000], got 0"),
    ("clips=0", "clips must be in [1, 100000] (and <= train_identities), got 0"),
    ("train_identities=3", "clips must be in [1, 3] (and <= train_identities), got 100"),  # failed after two phases
    ("clip_seconds=0.2",
     "clip_seconds=0.2 gives 5 frames; the A2V phases cut windows of 18: give clip_seconds >= 0.72"),
    ("save_dtype=int3", "save_dtype must be one of float16, bfloat16, float32, got 'int3'"),
    ("vae_steps=-5", "vae_steps must be in [0, 10000000], got -5"),
    ("log_every=0", "log_every must be in [1, 10000000], got 0"),
])  # fmt: skip
def test_a_recipe_value_that_would_fail_during_or_after_training_is_refused_before_it(override, says):
    # each of these ended in an 'unexpected' error (exit 1) seconds to minutes into a run, or was accepted
    with pytest.raises(ConfigError) as caught:
        load_recipe([override])
    assert str(caught.value) == f"training config: {says}"


def test_a_short_clip_is_enough_when_no_a2v_phase_cuts_long_windows():
    assert load_recipe(["a2v_distill_steps=0", "clip_seconds=0.48"]).clip_seconds == 0.48
    # init_from without distillation makes no clip at all (it ended in 'max() arg is an empty sequence')
    assert load_recipe(["init_from=/some/checkpoint", "a2v_distill_steps=0", "clip_seconds=0"]).clip_seconds == 0
    assert load_recipe(["seed=4294967296"]).seed == 2**32  # 64-bit seeds, as a render's
