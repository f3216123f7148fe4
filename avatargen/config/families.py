"""Model families: which family a model option belongs to, and what the rest of avatargen may ask of it.

A family is one folder, ``avatargen/families/<name>/``, holding its config section, its models, how they are built
and placed, its stages and the per-chunk steps the chunk engine runs (avatargen/pipeline/family.py). Its package
exposes one ``FAMILY`` object. avatargen finds a family by its name in ``FAMILIES`` (the registry: one line per
family) or, for a family that lives in another package, through the ``avatargen.families`` entry point group, whose
entries name a ``Family`` object (``name = "package.module:FAMILY"``). Shared code never names a family: it asks
this module (``family_of(config)``).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Callable

from avatargen.config.schema import Config, ModelConfig
from avatargen.errors import ConfigError

# The registry: a family's name and the package that defines it (its ``FAMILY``).
FAMILIES: dict[str, str] = {
    "tiny": "avatargen.families.tiny",
    "wan": "avatargen.families.wan",
    "liveavatar": "avatargen.families.liveavatar",
}

ENTRY_POINT_GROUP = "avatargen.families"


def _no_checks(config: Config) -> None:
    """A family whose keys need no check beyond their types."""


@dataclass(frozen=True)
class Family:
    """What avatargen knows of a model family; each family's package defines one as ``FAMILY``.

    The callables are the family's plug-in points (typed where they are used, avatargen/pipeline/family.py):
    ``build_models(config, device, parallel) -> PlacedModels`` builds and places its modules once per process;
    ``chunk_steps(config, models, composited) -> ChunkSteps`` gives the per-chunk steps the engine runs;
    ``weight_files(config) -> list[Path]`` the files a render reads (resume fingerprints, never overwritten);
    ``check_weights(config, folder) -> report`` (optional) checks a downloaded folder (``avatargen weights check``);
    ``parallel_work(config) -> SplittableWork`` (optional, avatargen/runtime/layout.py) what of one render its ranks
    can split under torchrun (guidance passes, the DiT's tokens); without it the ranks split nothing;
    ``framing(config, height, width) -> Framing | None`` (optional) frames pictures of that size itself
    (pipeline/inputs.py; None: the square of ``pipeline.image_fit``, the default);
    ``train(overrides, out) -> summary`` (optional) its training recipe (``avatargen train --family NAME``);
    ``reference_notes(config, *, picture, square, prompt, composited, warped, is_photo, warn)`` (optional) the lines
    a render of it says about its reference image and prompt, once they are opened (the bundled model: cartoons only).
    """

    name: str
    model_config: type[ModelConfig]  # the ``model`` section: the shared keys and the family's own
    build_models: Callable[..., Any]
    chunk_steps: Callable[..., Any]
    weight_files: Callable[[Config], list[Path]]
    validate: Callable[[Config], None] = _no_checks  # cross-key checks (ConfigError naming the key)
    check_weights: Callable[..., Any] | None = None
    parallel_work: Callable[[Config], Any] | None = None
    interpolates: bool = True  # ``pipeline.interpolate=null`` runs I chunks
    composited: bool = False  # its frames are the framed face square the compositor can put back into the picture
    overlap: bool = False  # its segments can leave on a second thread while the next chunks generate
    config_dir: Path | None = None  # a folder of model options (``<option>.yaml``) it adds, beside conf/model/
    framing: Callable[..., Any] | None = None
    follows_video: bool = False  # it can follow a source video (``--video``: dubbing)
    speakers: int = 1  # audio tracks it routes to as many speakers (``-a`` given that many times)
    shipped_checkpoints: dict[str, Path] = field(default_factory=dict)  # model option -> checkpoint folder in the package
    train: Callable[[list[str], Path], dict] | None = None  # ``avatargen train``: (recipe overrides, out folder) -> summary
    reference_notes: Callable[..., None] | None = None


_loaded: dict[str, Family] = {}


def register_family(family: Family) -> None:
    """Make ``family`` known under its name (a family defined outside ``FAMILIES``, e.g. in a test)."""
    _loaded[family.name] = family


def _from_entry_points(name: str) -> Family | None:
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        if entry.name == name:
            family = entry.load()
            if not isinstance(family, Family) or family.name != name:
                raise ConfigError(f"entry point '{entry.value}' of group {ENTRY_POINT_GROUP} is not the Family '{name}'")
            return family
    return None


def family_named(name: str) -> Family:
    """The family called ``name`` (imported on first use); ConfigError naming the known ones."""
    if name not in _loaded:
        if name in FAMILIES:
            family = importlib.import_module(FAMILIES[name]).FAMILY
        else:
            family = _from_entry_points(name)
        if family is None:
            known = sorted(set(FAMILIES) | set(_loaded) | {e.name for e in entry_points(group=ENTRY_POINT_GROUP)})
            raise ConfigError(f"model.family '{name}' is not a model family; known families: {', '.join(known)}")
        _loaded[name] = family
    return _loaded[name]


def family_of(config: Config) -> Family:
    """The family of a resolved config's model."""
    return family_named(config.model.family)


def extra_model_options() -> dict[str, Path]:
    """Model options (name -> YAML file) that families outside conf/model/ add: registered ones and entry points."""
    options: dict[str, Path] = {}
    families = list(_loaded.values())
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        if entry.name not in _loaded and entry.name not in FAMILIES:
            loaded = _from_entry_points(entry.name)
            if loaded is not None:
                families.append(loaded)
    for family in families:
        if family.config_dir is not None:
            options.update({path.stem: path for path in sorted(family.config_dir.glob("*.yaml"))})
    return options


def interpolates(config: Config) -> bool:
    """Whether the render runs I chunks: ``pipeline.interpolate``, or when it is null the family's default."""
    if config.pipeline.interpolate is not None:
        return config.pipeline.interpolate
    return family_of(config).interpolates
