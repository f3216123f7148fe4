"""Hydra-style config composition and validation, through the library and the real CLI."""

from __future__ import annotations

import pytest
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


@pytest.mark.parametrize(
    "override, expected",
    [
        ("pipeline.n_chunk=3", "unknown config key 'pipeline.n_chunk'; valid keys under 'pipeline': n_chunk_frames"),
        ("pipeline.n_chunk_frames=abc", "config key 'pipeline.n_chunk_frames'"),
        ("model=huge", "unknown model option 'huge'; valid choices: infinitetalk, multitalk, tiny, wan_tiny"),
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
