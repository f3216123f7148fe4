"""Every config default lives in one place, the schema: the option files state only what they change."""

from __future__ import annotations

from pathlib import Path

import yaml
from omegaconf import OmegaConf

from avatargen.config.families import family_named
from avatargen.config.loader import default_config_dir, load_config
from avatargen.config.schema import GROUPS, Config

KEPT = ("name", "family")  # a model option names itself and its family: that is how it is found


def _defaults(group: str, option: dict) -> dict:
    if group == "model":
        schema = family_named(option["family"]).model_config()
    else:
        schema = getattr(Config(), group)
    return OmegaConf.to_container(OmegaConf.structured(schema), resolve=True, enum_to_str=True)


def _restated(option: dict, defaults: dict, prefix: str = "") -> list[str]:
    found = []
    for key, value in option.items():
        if isinstance(value, dict) and isinstance(defaults.get(key), dict):
            found += _restated(value, defaults[key], f"{prefix}{key}.")
        elif key in defaults and defaults[key] == value and key not in KEPT:
            found.append(f"{prefix}{key}")
    return found


def test_no_option_file_restates_a_default():
    restated = {}
    for group in GROUPS:
        for path in sorted((default_config_dir() / group).glob("*.yaml")):
            option = yaml.safe_load(path.read_text()) or {}
            keys = _restated(option, _defaults(group, option))
            if keys:
                restated[str(path.relative_to(default_config_dir()))] = keys
    root = yaml.safe_load((default_config_dir() / "config.yaml").read_text())
    assert set(root) == {"defaults"}, root  # the root picks options; its values would be defaults written twice
    assert not restated, restated


def test_the_default_config_is_the_schema():
    loaded = OmegaConf.to_container(load_config([]), resolve=True, enum_to_str=True)
    model = family_named(loaded["model"]["family"]).model_config()
    schema = OmegaConf.to_container(OmegaConf.structured(Config(model=model)), resolve=True, enum_to_str=True)
    assert loaded == schema
    assert Path(default_config_dir(), "pipeline", "default.yaml").is_file()  # what the defaults list names
