"""Hydra-style config composition and validation, through the library and the real CLI."""

from __future__ import annotations

import pytest
import torch
import yaml

from avatargen.config import load_config, to_config
from avatargen.errors import ConfigError
from tests.conftest import run_cli


def test_defaults_compose_into_a_typed_config():
    config = to_config(load_config())
    assert config.model.name == "tiny"
    assert config.pipeline.n_chunk_frames == 16
    assert config.output.preset == "veryfast"
    assert config.runtime.device.value == "auto"


def test_overrides_set_values_pick_groups_and_add_keys():
    cfg = load_config(["pipeline.n_chunk_frames=32", "pipeline=no_interp", "+meta.job=42", "output.preset=ultrafast"])
    config = to_config(cfg)
    assert config.pipeline.n_chunk_frames == 32  # value overrides apply after the group option is picked
    assert config.pipeline.interpolate is False
    assert cfg.meta.job == 42
    assert config.output.preset == "ultrafast"
    # a typed key may refer to an added one, in either order (it failed as 'unexpected InterpolationKeyError', exit 1)
    refers = "pipeline.n_chunk_frames=${meta.x}"
    for order in ([refers, "+meta.x=24"], ["+meta.x=24", refers]):
        assert to_config(load_config(order)).pipeline.n_chunk_frames == 24


@pytest.mark.parametrize(
    "override, expected",
    [
        ("pipeline.n_chunk=3", "unknown config key 'pipeline.n_chunk'; valid keys under 'pipeline': n_chunk_frames"),
        ("pipeline.n_chunk_frames=abc", "config key 'pipeline.n_chunk_frames'"),
        ("model=huge", "unknown model option 'huge'; valid choices: infinitetalk, liveavatar, liveavatar_tiny, multitalk, tiny, wan_tiny"),
        ("runtime.device=tpu", "runtime.device"),
        ("+pipeline.extra=1", "cannot add keys to the typed 'pipeline' section"),
        ("pipeline.seam_frames=20", "pipeline.seam_frames + 2 * pipeline.anchor_frames"),
        ("nonsense", "is not key=value"),
    ],
)
def test_bad_overrides_name_the_key(override, expected):
    with pytest.raises(ConfigError) as error:
        load_config([override])
    assert expected in str(error.value)
    assert "\n" not in str(error.value)


def test_config_command_prints_resolved_yaml():
    result = run_cli("config", "pipeline.sampling_steps=2", "+tag.name=demo")
    assert result.returncode == 0, result.stderr
    resolved = yaml.safe_load(result.stdout)
    assert resolved["pipeline"]["sampling_steps"] == 2
    assert resolved["tag"] == {"name": "demo"}
    assert set(resolved) >= {"model", "pipeline", "output", "runtime", "seed"}


@pytest.mark.parametrize(
    "override, names",
    [
        ("pipeline.bogus=1", "pipeline.bogus"),
        ("pipeline.n_chunk_frames=lots", "pipeline.n_chunk_frames"),
        ("runtime=turbo", "valid choices: cpu, default"),
    ],
)
def test_cli_config_errors_exit_2_with_one_line_and_no_traceback(override, names):
    result = run_cli("config", override)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and names in lines[0], result.stderr
    assert "Traceback" not in result.stderr


# Values that passed the per-key type check and then crashed (exit 1, a traceback or a segfault) once work started.
@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["seed=${oc.env:AVATARGEN_UNSET_VARIABLE}"],
         "config key 'seed' could not be resolved (KeyError raised while resolving interpolation: \"Environment "
         "variable 'AVATARGEN_UNSET_VARIABLE' not found\"); fix or remove the ${...} interpolation"),  # whole
        (["pipeline.n_chunk_frames=${pipeline.n_chunk_frames}"], "config key 'pipeline.n_chunk_frames' could not be resolved"),
        (["+meta.where=${oc.env:AVATARGEN_UNSET_VARIABLE}"], "config key 'meta.where' could not be resolved"),
        (["+meta.x=${seed"], "config key 'meta.x': no viable alternative at input '${seed'"),  # was exit 1, 3 lines
        (["model.a2v.heads=0"], "model.a2v.heads must be in [1, 16384], got 0"),
        (["model.sr.heads=3"], "model.sr cannot be built from its config (dim (128) must be divisible by heads (3))"),
        (["model.a2v.patch_size=3"], "model.a2v cannot be built"),
        (["model.fps=1000", "model.audio_encoder.fps=1000"], "model.fps must be in [1, 240], got 1000"),
        (["model.text_encoder.max_tokens=1"], "model.text_encoder.max_tokens must be >= 2"),
        (["output.gop_seconds=1e9"], "output.gop_seconds must be in (0, 60]"),
        (["runtime.threads=100000"], "runtime.threads must be in [0, 1024]"),
        (["model.a2v.depth=1000000000"], "model.a2v.depth must be in [0, 256]"),  # a meta build of 1e9 blocks never ends
        (["pipeline.idle_motion.blinks_per_minute=200"], "pipeline.idle_motion.blinks_per_minute=200.0: use 0 (off) to 60"),
        # numbers that reached an allocation, a clock, a seed or a C integer (exit 1, some leaving a partial)
        (["seed=-1"], "seed must be in [0, 9223372036854775807], got -1"),
        (["pipeline.audio_block_s=.inf"], "pipeline.audio_block_s must be a finite number, got inf"),
        (["pipeline.sampling_steps=1000000000000"], "pipeline.sampling_steps must be in [1, 1000]"),
        (["model.a2v.mlp_ratio=.nan"], "model.a2v.mlp_ratio must be a finite number, got nan"),
        (["model.sr.mlp_ratio=-.inf"], "model.sr.mlp_ratio must be a finite number, got -inf"),
        (["output.realtime_buffer_s=1e308"], "output.realtime_buffer_s must be in [0, 3600] (seconds)"),
        (["model.audio_encoder.hop_length=-160"], "model.audio_encoder.hop_length must be in [1, 16384], got -160"),
        (["model.sr.mlp_ratio=1e300"], "model.sr.mlp_ratio must give an MLP of 1 to 64 x model.sr.dim units, got 1e+300"),
        (["model.audio_encoder.dim=0"], "model.audio_encoder.dim must be in [1, 16384], got 0"),  # built, then failed mid-render
        (["model.a2v.mlp_ratio=1e-320"], "model.a2v.mlp_ratio must give an MLP of 1 to 64"),  # 0 units: torch warned each render
        (["model.a2v.dim=16384"], "model.a2v would have 27,929,460,768 parameters, over the limit"),
        (["+x=" + "[" * 200 + "]" * 200], "nests lists or mappings over 32 levels deep"),
        (["+" + ".".join(["a"] * 200) + "=1"], "has a key 200 levels deep, over 32"),
    ],
)  # fmt: skip
def test_values_that_cannot_run_fail_at_load_naming_the_key(overrides, expected):
    with pytest.raises(ConfigError) as error:
        load_config(overrides)
    assert expected in str(error.value) and "\n" not in str(error.value)


def test_i_chunks_default_on_for_avatargens_models_and_off_for_wan_models():
    import torch

    from avatargen.pipeline.build import build_models, pipeline_for
    from avatargen.runtime.distributed import ParallelContext, world_info
    from tests.conftest import engine_of

    def interpolates(*overrides: str) -> bool:
        config = to_config(load_config(["model.weights=random", *overrides]))
        engine = engine_of(config)
        models = build_models(config, engine, torch.device("cpu"), ParallelContext(world_info()))
        return pipeline_for(config, models, engine).schedule.interpolate

    assert interpolates()
    assert not interpolates("model=wan_tiny")
    assert interpolates("model=wan_tiny", "pipeline.interpolate=true")


@pytest.mark.parametrize(
    ("override", "named"),
    [("model.wan.anchor_frames=3", "model.wan.anchor_frames"), ("model.wan.seam_frames=4", "model.wan.seam_frames"),
     ("model.wan.seam_frames=16", "seam_frames")],  # wan_tiny's clips add 8 frames: a 16-frame seam does not fit
)
def test_wan_seam_sizes_off_the_latent_grid_or_too_big_for_a_clip_are_refused_naming_the_key(override, named):
    with pytest.raises(ConfigError) as error:
        load_config(["model=wan_tiny", override])
    assert named in str(error.value) and "\n" not in str(error.value)


def test_overlap_is_on_for_one_cpu_process_and_refused_where_two_threads_would_collide():
    from avatargen.pipeline.overlap import overlaps

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        config = to_config(load_config([]))
        assert overlaps(config, cpu, 1) and not overlaps(config, cuda, 1) and not overlaps(config, cpu, 2)
        assert not overlaps(to_config(load_config(["runtime.overlap=false"])), cpu, 1)
        torch.set_num_threads(1)
        assert not overlaps(config, cpu, 1)
    finally:
        torch.set_num_threads(threads)
    with pytest.raises(ConfigError, match="runtime.overlap=true cannot run a sharded render"):
        overlaps(to_config(load_config(["runtime.overlap=true"])), cpu, 2)
    with pytest.raises(ConfigError, match="runtime.overlap=true needs runtime.offload=none"):
        load_config(["runtime.overlap=true", "runtime.offload=model"])
