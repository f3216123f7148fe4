"""Hydra-style config composition: a defaults list over groups, then command-line overrides.

Grammar (a subset of Hydra's): ``group=option`` picks ``conf/<group>/<option>.yaml``; ``a.b=value`` sets an existing
key; ``+a.b=value`` adds a key that the schema does not have (outside the typed sections, e.g. ``+meta.job=42``);
``~a.b`` removes such an added key. Values are parsed as YAML scalars or flow lists (``[1, 2]``). Every error is a
``ConfigError`` with one line that names the key and what is valid.
"""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError, OmegaConfBaseException

from avatargen.config.families import extra_model_options, family_named
from avatargen.config.schema import GROUPS, Config
from avatargen.config.validate import validate_config
from avatargen.errors import ConfigError, first_line

MAX_NESTING = 32  # levels of a dotted key or of a value's lists and mappings: far past any config, far below recursion limits
SHOWN_CHARS = 80  # of an override echoed in a message
REASON_CHARS = 240  # of OmegaConf's reason in a message (it may quote a value: a long one is cut)


def _shown(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` as a message quotes it: at most ``limit`` characters."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _bracket_depth(text: str) -> int:
    """The deepest nesting of ``[`` and ``{`` in ``text`` (an upper bound on a YAML flow value's nesting)."""
    depth = deepest = 0
    for char in text:
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth = max(0, depth - 1)
    return deepest


def default_config_dir() -> Path:
    """The top-level ``conf/`` folder: in a source checkout beside the package, in a wheel as ``avatargen.conf``."""
    source_tree = Path(__file__).resolve().parents[2] / "conf"
    if (source_tree / "config.yaml").is_file():
        return source_tree
    # conf/ has no __init__.py: installed, it is a namespace package, whose one folder its spec lists
    spec = importlib.util.find_spec("avatargen.conf")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("the config folder (avatargen/conf) is not installed; reinstall avatargen")
    return Path(next(iter(spec.submodule_search_locations)))


@dataclass(frozen=True)
class Override:
    """One parsed ``key=value`` argument."""

    key: str
    value: Any
    add: bool = False  # '+key=value'
    delete: bool = False  # '~key'


def parse_override(text: str) -> Override:
    """Parse one Hydra-style override; raise ConfigError on malformed text."""
    if text.startswith("~"):
        key = text[1:].split("=", 1)[0]
        _check_key(text, key)
        return Override(key=key, value=None, delete=True)
    if "=" not in text:
        raise ConfigError(f"override '{_shown(text)}' is not key=value; write e.g. pipeline.n_chunk_frames=32 or model=tiny")
    key, raw = text.split("=", 1)
    add = key.startswith("+")
    key = key.lstrip("+")
    _check_key(text, key)
    if _bracket_depth(raw) > MAX_NESTING:
        raise ConfigError(f"override '{_shown(text)}' nests lists or mappings over {MAX_NESTING} levels deep; flatten it")
    try:
        value = yaml.safe_load(raw) if raw != "" else ""
    except yaml.YAMLError:
        value = raw  # not YAML: keep the text, the schema decides whether a string is acceptable
    except RecursionError:
        raise ConfigError(f"override '{_shown(text)}' nests too deep to read; flatten it") from None
    return Override(key=key, value=value, add=add)


def _check_key(text: str, key: str) -> None:
    if not key or not all(part.isidentifier() for part in key.split(".")):
        raise ConfigError(f"override '{_shown(text)}' has an invalid key '{_shown(key)}'; keys are dotted names like "
                          "pipeline.seam_frames")  # fmt: skip
    if key.count(".") >= MAX_NESTING:
        raise ConfigError(f"override '{_shown(text)}' has a key {key.count('.') + 1} levels deep, over {MAX_NESTING}; "
                          "use a flatter key")  # fmt: skip


def group_options(config_dir: Path, group: str) -> list[str]:
    """The option names of a config group (the YAML files in ``conf/<group>/``, and for ``model`` the options that
    families outside it add)."""
    names = {p.stem for p in (config_dir / group).glob("*.yaml")}
    if group == "model":
        names |= set(extra_model_options())
    return sorted(names)


def option_file(config_dir: Path, group: str, option: str) -> Path:
    """The YAML file of ``group=option``; ConfigError listing the valid choices when there is none."""
    path = config_dir / group / f"{option}.yaml"
    if path.is_file():
        return path
    if group == "model" and option in (extra := extra_model_options()):
        return extra[option]
    raise ConfigError(f"unknown {group} option '{_shown(option)}'; valid choices: {', '.join(group_options(config_dir, group))}")


def _read_yaml(path: Path) -> DictConfig:
    try:
        loaded = OmegaConf.load(path)
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"config file '{path}' could not be read ({error.__class__.__name__}); fix its YAML") from error
    if not isinstance(loaded, DictConfig):
        raise ConfigError(f"config file '{path}' must hold a mapping of keys")
    return loaded


def _defaults_choices(root: DictConfig, path: Path) -> dict[str, str]:
    choices: dict[str, str] = {}
    for entry in root.get("defaults", []):
        if entry == "_self_":
            continue
        if not isinstance(entry, DictConfig) or len(entry) != 1:
            raise ConfigError(f"'{path}': each defaults entry must be 'group: option' or _self_")
        (group, option), = entry.items()
        choices[str(group)] = str(option)
    return choices


def _one_line(error: OmegaConfBaseException) -> str:
    return _shown(first_line(error).replace("Key '", "key '"), REASON_CHARS)


def _valid_keys(node: Any) -> str:
    if isinstance(node, DictConfig):
        return ", ".join(str(k) for k in node.keys())
    return "(not a section)"


def _parent_and_leaf(cfg: DictConfig, key: str) -> tuple[Any, str, str]:
    parent_key, _, leaf = key.rpartition(".")
    parent = OmegaConf.select(cfg, parent_key) if parent_key else cfg
    return parent, parent_key, leaf


def _apply_value(cfg: DictConfig, override: Override) -> None:
    top = override.key.split(".")[0]
    typed = top in Config.__dataclass_fields__
    parent, parent_key, leaf = _parent_and_leaf(cfg, override.key)
    exists = isinstance(parent, DictConfig) and leaf in parent
    where = f"under '{parent_key}'" if parent_key else "at the top level"
    if override.delete:
        if typed:
            raise ConfigError(f"cannot remove '{override.key}': it is part of the schema; set a value instead")
        if not exists:
            raise ConfigError(f"cannot remove '{override.key}': no such key")
        OmegaConf.set_struct(cfg, False)
        parent.pop(leaf)
        OmegaConf.set_struct(cfg, True)
        return
    if override.add:
        if exists:
            raise ConfigError(f"'+{override.key}' adds a key that already exists; drop the '+' to set it")
        if typed:
            raise ConfigError(
                f"'+{override.key}' cannot add keys to the typed '{top}' section; valid keys {where}: {_valid_keys(parent)}"
            )
        OmegaConf.set_struct(cfg, False)
        try:
            OmegaConf.update(cfg, override.key, override.value, force_add=True)
        except OmegaConfBaseException as error:
            raise ConfigError(f"config key '{override.key}': {_one_line(error)}") from error
        finally:
            OmegaConf.set_struct(cfg, True)
        return
    if not exists:
        if isinstance(parent, DictConfig):
            raise ConfigError(f"unknown config key '{override.key}'; valid keys {where}: {_valid_keys(parent)}")
        raise ConfigError(f"unknown config key '{override.key}': '{parent_key}' is not a section")
    try:
        OmegaConf.update(cfg, override.key, override.value, merge=False)
    except OmegaConfBaseException as error:
        raise ConfigError(f"config key '{override.key}': {_one_line(error)}") from error


def load_config(overrides: Sequence[str] = (), config_dir: Path | None = None, live: bool = False) -> DictConfig:
    """Compose ``config.yaml``'s defaults list with ``overrides`` and validate the result against the schema.
    ``live``: a live render (``--realtime`` with ``--audio -``): the model family's ``live_overrides`` go in front
    of ``overrides`` (a key the user set keeps the user's value; docs/live.md).

    Returns a struct-mode DictConfig (typed; unknown keys rejected). Use :func:`to_config` for the dataclass view.
    """
    config_dir = Path(config_dir) if config_dir else default_config_dir()
    root_path = config_dir / "config.yaml"
    if not root_path.is_file():
        raise ConfigError(f"no config.yaml in config folder '{config_dir}'")
    root = _read_yaml(root_path)
    choices = _defaults_choices(root, root_path)
    if live:
        overrides = _with_live_overrides(list(overrides), config_dir, choices)

    parsed = [parse_override(text) for text in overrides]
    value_overrides = []
    for override in parsed:
        if override.key in GROUPS and not override.add and not override.delete:
            option_file(config_dir, override.key, str(override.value))  # an unknown option fails here
            choices[override.key] = str(override.value)
        elif override.key == "model.family" and not override.delete:
            raise ConfigError("model.family is set by the model option; choose another model (model=NAME), e.g. "
                              f"one of: {', '.join(group_options(config_dir, 'model'))}")  # fmt: skip
        else:
            value_overrides.append(override)

    sections = {group: _read_yaml(option_file(config_dir, group, choices[group])) for group in GROUPS if group in choices}
    family = family_named(_family_name(sections.get("model", {}), choices.get("model")))
    own = {k: v for k, v in root.items() if k != "defaults"}
    try:  # one merge, in this order, onto a copy of the schema (merging one at a time copies the config each time)
        cfg = OmegaConf.merge(_structured_schema(family.model_config),
                              *({group: section} for group, section in sections.items()), own)  # fmt: skip
    except OmegaConfBaseException as error:
        key = getattr(error, "full_key", None) or "?"
        raise ConfigError(f"config key '{key}' in the config files: {_one_line(error)}") from error
    OmegaConf.set_struct(cfg, True)
    for override in value_overrides:
        _apply_value(cfg, override)
    _resolve_interpolations(cfg)
    validate_config(to_config(cfg), family)
    return cfg


def _family_name(model_section: Any, option: str | None) -> str:
    family = str(model_section.get("family", "") or "")
    if not family:
        raise ConfigError(f"model option '{option}' names no family; its YAML must set family: NAME")
    return family


def _with_live_overrides(overrides: list[str], config_dir: Path, choices: dict[str, str]) -> list[str]:
    """``overrides`` with the chosen model family's live defaults in front, but those whose key the user set."""
    model = next((o.value for o in map(parse_override, overrides) if o.key == "model" and not o.add and not o.delete),
                 choices.get("model"))  # fmt: skip
    family = family_named(_family_name(_read_yaml(option_file(config_dir, "model", str(model))), str(model)))
    given = {parse_override(text).key for text in overrides}
    return [item for item in family.live_overrides if parse_override(item).key not in given] + overrides


def _resolve_interpolations(cfg: DictConfig) -> None:
    """Resolve every ``${...}`` once, now: an unset ``${oc.env:X}`` or a key that refers to itself fails here with one
    line, not later while the config is saved beside a finished video."""
    try:
        OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except OmegaConfBaseException as error:
        key = getattr(error, "full_key", None) or "?"
        raise ConfigError(f"config key '{key}' could not be resolved ({_one_line(error)}); fix or remove the ${{...}} "
                          "interpolation") from None  # fmt: skip


def to_config(cfg: DictConfig) -> Config:
    """The typed dataclass view of a composed config (extra '+' sections are dropped here; they only travel in YAML)."""
    schema = _structured_schema(family_named(str(cfg.model.family)).model_config)
    sections = list(Config.__dataclass_fields__)
    try:
        typed = OmegaConf.to_object(OmegaConf.merge(schema, OmegaConf.masked_copy(cfg, sections)))
    except InterpolationResolutionError:  # a typed key that refers to an added one ('+meta.x'), which the mask drops
        resolved = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
        typed = OmegaConf.to_object(OmegaConf.merge(schema, OmegaConf.masked_copy(resolved, sections)))
    return typed  # type: ignore[return-value]


@functools.cache
def _structured_schema(model_config: type) -> DictConfig:
    """The typed config of a render of a model whose ``model`` section is ``model_config`` (a family's own), as an
    OmegaConf config: built once per process (~45 ms each time, and a render loads and converts its config);
    ``OmegaConf.merge`` copies it and never changes it."""
    return OmegaConf.structured(Config(model=model_config()))


def to_yaml(cfg: DictConfig) -> str:
    """The resolved config as YAML (what ``avatargen config`` prints and what is saved beside the output)."""
    return OmegaConf.to_yaml(cfg, resolve=True)
