"""Model families as a config knows them: a name, the ``model`` section's schema and checks, the folder of its model
options, and where its engine is -- everything loading and validating a config needs, importable without torch.

A family is one folder, ``avatargen/families/<name>/``. Its ``config.py`` defines ``FAMILY``, a ``FamilyConfig``;
``FamilyConfig.engine`` names its engine -- models, placement, chunk steps: a ``FamilyEngine``
(avatargen/pipeline/family.py) -- as ``"package.module:ATTR"``, imported only when a render needs it. avatargen finds
a family by its name in ``FAMILIES`` (the registry: one line per family) or, for a family that lives in another
package, through the ``avatargen.families`` entry point group, whose entries name a ``FamilyConfig``. A render
resolves its family once and hands it down; nothing below it looks a family up by name. ``load_object`` is the one
place where avatargen imports a module by a name it reads (tests/architecture/test_import_graph.py holds it to that).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Callable, Mapping

from avatargen.config.schema import Config, ModelConfig
from avatargen.errors import CheckpointError, ConfigError

# The registry: a family's name and its ``FamilyConfig``.
FAMILIES: dict[str, str] = {
    "tiny": "avatargen.families.tiny.config:FAMILY",
    "wan": "avatargen.families.wan.config:FAMILY",
    "liveavatar": "avatargen.families.liveavatar.config:FAMILY",
}

ENTRY_POINT_GROUP = "avatargen.families"


def _no_checks(config: Config) -> None:
    """A family whose keys need no check beyond their types."""


@dataclass(frozen=True)
class FamilyConfig:
    """What a config knows of a model family; each family's ``config.py`` defines one as ``FAMILY``.

    ``validate(config)`` raises ConfigError naming a key the family cannot run with; ``config_dir`` is a folder of
    model options (``<option>.yaml``) it adds beside conf/model/; ``overlap``: its segments can leave on a second
    thread (``runtime.overlap=true`` is refused without it); ``live_overrides``: what ``--realtime`` with ``--audio
    -`` puts in front of the user's overrides (the bundled model renders live in small chunks: docs/live.md);
    ``recipe``: "package.module:ATTR" of its training recipe's loader, ``(overrides) -> recipe`` without torch (a bad
    key is refused before the engine loads), whose recipe its engine's ``train`` runs; None: no recipe here."""

    name: str
    model_config: type[ModelConfig]  # the ``model`` section: the shared keys and the family's own
    engine: str  # "package.module:ATTR" of its ``FamilyEngine``
    validate: Callable[[Config], None] = _no_checks
    config_dir: Path | None = None
    overlap: bool = False
    live_overrides: tuple[str, ...] = ()
    recipe: str | None = None


def load_object(reference: str) -> Any:
    """The object ``"package.module:ATTR"`` names (a family's config or engine), imported on first use."""
    module, _, attribute = reference.partition(":")
    try:
        return getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as error:
        raise ConfigError(f"'{reference}' cannot be loaded ({error}); reinstall the package that provides it") from None


def resolve_checkpoint(config: Config, shipped: Mapping[str, Path]) -> Path:
    """``model.checkpoint``, or the folder ``shipped`` in the package for the model option; fails with the fix when
    neither exists."""
    if config.model.checkpoint:
        return Path(config.model.checkpoint).expanduser()
    path = shipped.get(config.model.name)
    if path is None or not path.exists():
        raise CheckpointError(
            f"no checkpoint is shipped for model '{config.model.name}'; set model.checkpoint=PATH, "
            "or model.weights=random for an untrained model (noise video, for tests)"
        )
    return path


_loaded: dict[str, FamilyConfig] = {}


def _from_entry_points(name: str) -> FamilyConfig | None:
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        if entry.name == name:
            family = load_object(entry.value)
            if not isinstance(family, FamilyConfig) or family.name != name:
                raise ConfigError(f"entry point '{entry.value}' of group {ENTRY_POINT_GROUP} is not the FamilyConfig '{name}'")
            return family
    return None


def family_named(name: str) -> FamilyConfig:
    """The family called ``name`` (its config module imported on first use); ConfigError naming the known ones."""
    if name not in _loaded:
        family = load_object(FAMILIES[name]) if name in FAMILIES else _from_entry_points(name)
        if family is None:
            known = sorted(set(FAMILIES) | {e.name for e in entry_points(group=ENTRY_POINT_GROUP)})
            raise ConfigError(f"model.family '{name}' is not a model family; known families: {', '.join(known)}")
        _loaded[name] = family
    return _loaded[name]


def extra_model_options() -> dict[str, Path]:
    """Model options (name -> YAML file) that families outside conf/model/ add through entry points."""
    options: dict[str, Path] = {}
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        if entry.name not in FAMILIES:
            family = family_named(entry.name)
            if family.config_dir is not None:
                options.update({path.stem: path for path in sorted(family.config_dir.glob("*.yaml"))})
    return options
