"""Typed configuration: the schema and the Hydra-style loader."""

from avatargen.config.loader import load_config, to_config, to_yaml
from avatargen.config.schema import Config

__all__ = ["Config", "load_config", "to_config", "to_yaml"]
