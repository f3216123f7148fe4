"""The docs stay true where a machine can tell: every `avatargen ...` command in the README and docs parses (its
subcommand and options exist, its key=value overrides resolve with the config loader; nothing renders), every
relative link and every file named resolves, and docs/configuration.md documents exactly the schema's keys.

Commands are parsed in-process by the Typer app's click parser, so the whole file takes a few seconds.
"""

from __future__ import annotations

import importlib.util
import itertools
import re
import shlex
from functools import lru_cache
from pathlib import Path

import pytest
import typer
from omegaconf import OmegaConf
from typer.testing import CliRunner

from avatargen.cli import app
from avatargen.config.loader import load_config
from avatargen.errors import ConfigError
from avatargen.families.tiny.train.config import load_recipe

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").glob("*.md"))]
SECTIONS = ("model", "pipeline", "output", "runtime")
FENCE = re.compile(r"^```.*?$(.*?)^```", re.S | re.M)
INLINE = re.compile(r"(?<!`)`([^`]+)`(?!`)")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
NAMED_FILE = re.compile(r"(?<![\w/.-])((?:docs|benchmarks|tests|examples|conf|avatargen)/[\w./-]*\w\.(?:md|py|sh|yaml|png|flac|html))\b")


def _rel(page: Path) -> str:
    return str(page.relative_to(REPO))


# --- finding the commands ---------------------------------------------------------------------------------------------


def _code_lines(text: str) -> list[str]:
    """The lines of the fenced code blocks, continuations (`\\` at the end) joined."""
    lines: list[str] = []
    for block in FENCE.findall(text):
        pending = ""
        for line in block.splitlines():
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            lines.append(pending + line)
            pending = ""
    return lines


def _invocations(line: str) -> list[list[str]]:
    """The argument lists of each `avatargen` run in a shell line: `avatargen ARGS`, `python -m avatargen ARGS`,
    `torchrun ... -m avatargen ARGS`, also inside a pipeline (`arecord ... | avatargen ... | ffplay -`)."""
    try:
        tokens = shlex.split(line, comments=True)
    except ValueError:  # an unbalanced quote: prose, not a command
        return []
    runs, segment = [], []
    for token in [*tokens, "|"]:
        if token not in ("|", "&&", ";", "||"):
            segment.append(token)
            continue
        if segment and segment[0] == "avatargen":
            runs.append(segment[1:])
        elif "-m" in segment and segment[segment.index("-m") + 1 : segment.index("-m") + 2] == ["avatargen"]:
            runs.append(segment[segment.index("-m") + 2 :])
        segment = []
    return runs


def _commands() -> list[tuple[str, list[str], bool]]:
    """(where, arguments, complete) for every `avatargen` command in the pages: each line of a code block, and each
    inline code span that starts with `avatargen `. ``complete``: the line is meant to run as written (no `...`
    elision, not a mention in prose), so required arguments must be there too."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for line in _code_lines(text):
            for args in _invocations(line):
                found.append((f"{_rel(page)}: {line.strip()}", args, "..." not in line))
        for span in INLINE.findall(FENCE.sub("", text)):
            # (a message avatargen prints, `avatargen batch: job N ...`, is not a command)
            if span.startswith(("avatargen ", "python -m avatargen ", "torchrun ")) and not re.match(r"avatargen \w+:", span):
                for args in _invocations(" ".join(span.split())):
                    found.append((f"{_rel(page)}: `{span}`", args, False))
    return found


COMMANDS = _commands()


def test_the_readme_tour_and_quick_start_are_found():
    readme = [args for where, args, _ in COMMANDS if where.startswith("README.md")]
    assert len(readme) >= 20, readme
    assert {args[0] for args in readme} >= {"render", "config", "batch", "eval", "synth", "train", "weights", "doctor"}


# --- parsing one command ----------------------------------------------------------------------------------------------


def _unwrap(args: list[str]) -> list[str]:
    """Drop the brackets of the docs' optional parts: `[--json]`, `[--seams 12,20] [pipeline.composite=false]`
    (a value's own list, `model.wan.lora=[a.safetensors]`, keeps its brackets)."""
    unwrapped = []
    for arg in args:
        arg = arg[1:] if arg.startswith("[") else arg
        unwrapped.append(arg[:-1] if arg.endswith("]") and arg.count("]") > arg.count("[") else arg)
    return unwrapped


def _drop_elisions(args: list[str], command) -> list[str]:
    """Drop the docs' `...` (elided arguments), except where it stands for an option's value (`--seams ...`)."""
    takes_value = {name for p in command.params if not getattr(p, "is_flag", True) for name in getattr(p, "opts", [])}
    return [a for i, a in enumerate(args) if a != "..." or (i > 0 and args[i - 1] in takes_value)]


def _expand(overrides: list[str]) -> list[list[str]]:
    """`key=a|b` in the docs means either value: every combination."""
    choices = [[f"{o.split('=', 1)[0]}={v}" for v in o.split("=", 1)[1].split("|")] if "=" in o else [o] for o in overrides]
    return [list(combination) for combination in itertools.product(*choices)]


@lru_cache(maxsize=2)
def _command_tree(lenient: bool):
    """The CLI's click command tree; ``lenient``: no parameter is required (what `...` elides may be a required
    option: the rest is parsed strictly all the same). get_command builds a fresh tree: the change does not leak."""
    group = typer.main.get_command(app)
    if lenient:
        commands = list(group.commands.values())
        while commands:
            command = commands.pop()
            commands += list(getattr(command, "commands", {}).values())
            for param in command.params:
                param.required = False
    return group


@lru_cache(maxsize=None)
def _resolve(kind: str, overrides: tuple[str, ...]) -> None:
    """Resolve overrides once per distinct set: with the training recipe's loader, or the render config's."""
    (load_recipe if kind == "train" else load_config)(list(overrides))


class UsageError(Exception):
    """A command line the CLI would refuse (unknown command or option, a missing argument, a bad value)."""


def parse(args: list[str], complete: bool) -> tuple[str, dict]:
    """Parse ``avatargen ARGS`` as the CLI would, without running it: (the command's path, its parsed parameters).
    Unknown commands and options raise UsageError; with ``complete`` a missing argument does too."""
    group = _command_tree(lenient=not complete)
    ctx = typer.Context(group, info_name="avatargen")
    args = [a for a in _unwrap(args) if a != "--help"]
    top_level = {name for param in group.params for name in getattr(param, "opts", [])}  # --version
    while args and args[0].startswith("-"):
        if args[0] not in top_level:
            raise UsageError(f"no option '{args[0]}' for avatargen itself")
        args = args[1:]
    if not args:
        return "", {}
    path, command = ["avatargen"], group
    while hasattr(command, "commands") and args:  # a group: the next word picks its command
        name, args = args[0], args[1:]
        sub = command.get_command(ctx, name)
        if sub is None:
            raise UsageError(f"no command '{name}' in {' '.join(path)}")
        path.append(name)
        command = sub
        ctx = typer.Context(command, info_name=name, parent=ctx)
    try:
        parsed = command.make_context(path[-1], _drop_elisions(args, command), parent=ctx.parent)
    except Exception as error:  # click's UsageError family (exit code 2), from the click that Typer uses
        if getattr(error, "exit_code", None) == 2 and hasattr(error, "format_message"):
            raise UsageError(error.format_message()) from None
        raise
    return " ".join(path[1:]), parsed.params


def check_overrides(path: str, params: dict) -> None:
    """The key=value arguments resolve: with the config loader (render, config, batch, weights check), or the
    training recipe's (train)."""
    overrides = [o for o in params.get("overrides") or [] if "=" in o or o.startswith("~")]
    if path == "batch" and str(params.get("jobs")) == "status":
        return  # `batch status DIR`: DIR is the folder, not an override
    for combination in _expand(overrides):
        if path in ("train", "render", "config", "batch", "weights check"):
            _resolve("train" if path == "train" else "config", tuple(combination))


@pytest.mark.parametrize("where, args, complete", COMMANDS, ids=[f"{i}" for i in range(len(COMMANDS))])
def test_every_documented_command_parses_and_its_overrides_resolve(where, args, complete):
    try:
        path, params = parse(args, complete)
        check_overrides(path, params)
    except (UsageError, ConfigError) as error:
        raise AssertionError(f"{where}\n  -> {error.__class__.__name__}: {error}") from None


def test_every_subcommand_has_working_help():
    runner = CliRunner()
    group = typer.main.get_command(app)
    paths = [[name] for name in group.commands] + [["weights", "check"]]
    for path in paths:
        result = runner.invoke(app, [*path, "--help"])
        assert result.exit_code == 0 and "Usage" in result.stdout, (path, result.output)


def test_every_options_help_is_shown_whole():
    """Rich reads '[default: 1]' or "avatargen[ray]" in a help text as markup and drops it unless escaped."""
    group = typer.main.get_command(app)
    commands = [([name], command) for name, command in group.commands.items()]
    commands += [(["weights", "check"], group.commands["weights"].commands["check"])]
    for path, command in commands:
        shown = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "1000"}).stdout
        shown = " ".join(shown.replace("│", " ").split())
        for param in command.params:
            text = " ".join((getattr(param, "help", None) or "").replace("\\[", "[").split())
            assert text in shown, (path, param.name, text)


def test_the_parser_catches_what_it_should():
    with pytest.raises(UsageError):
        parse(["render", "--no-such-option"], complete=False)
    with pytest.raises(UsageError):
        parse(["rendr", "-i", "a.png"], complete=False)
    with pytest.raises(UsageError):
        parse(["--verbose"], complete=True)
    assert parse(["--version"], complete=True) == ("", {})
    with pytest.raises(UsageError):
        parse(["render", "-o", "x.mp4"], complete=True)  # -i and -a are required when the line is meant to run
    with pytest.raises(ConfigError):
        check_overrides(*parse(["render", "...", "pipeline.n_chunk_frame=3"], complete=False))
    with pytest.raises(ConfigError):
        check_overrides(*parse(["render", "...", "pipeline.mouth=blend|smear"], complete=False))


# --- links and named files --------------------------------------------------------------------------------------------


@lru_cache(maxsize=None)
def anchors(page: Path) -> frozenset[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to hyphens, repeats numbered."""
    slugs: list[str] = []
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*$", FENCE.sub("", page.read_text()), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", "")).replace(" ", "-")
        count = slugs.count(slug) if slug in slugs else 0
        slugs.append(slug if not count else f"{slug}-{count}")
    return frozenset(slugs)


def test_every_relative_link_resolves_to_a_file_and_its_anchor():
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if re.match(r"^[a-z]+:", target):
                continue  # http(s), mailto: not checked here (no network)
            path_part, _, anchor = target.partition("#")
            path = (page.parent / path_part).resolve() if path_part else page
            if not path.exists():
                broken.append(f"{_rel(page)}: ({target}): no such file")
            elif anchor and path.suffix == ".md" and anchor not in anchors(path):
                broken.append(f"{_rel(page)}: ({target}): no heading with anchor #{anchor}")
    assert not broken, "\n".join(broken)


def test_every_image_in_docs_images_is_shown_somewhere():
    shown = "".join(page.read_text() for page in PAGES)
    orphans = [p.name for p in sorted((REPO / "docs" / "images").glob("*")) if f"images/{p.name}" not in shown]
    assert not orphans, f"not shown by any page (git keeps the history; remove them): {orphans}"


def test_every_file_the_docs_and_docstrings_name_exists():
    missing = set()
    sources = [*PAGES, *sorted((REPO / "avatargen").rglob("*.py")), *sorted((REPO / "benchmarks").glob("*"))]
    for source in sources:
        if source.suffix not in (".md", ".py", ".sh"):
            continue
        for name in NAMED_FILE.findall(source.read_text()):
            if not (REPO / name).exists() and not (REPO / "avatargen" / name).exists():
                missing.add(f"{_rel(source)}: {name}")
    assert not missing, "\n".join(sorted(missing))


SECTION_REFERENCE = re.compile(r'(docs/[\w-]+\.md),?\s*(?:#\s*)?"([^"\n]+)"')


def _sections(page: Path) -> list[str]:
    """A page's headings and the bold leads of its paragraphs (`**Overlapped emission** (...)`), lower case."""
    text = FENCE.sub("", page.read_text())
    found = re.findall(r"^#{1,6}\s+(.+?)\s*$", text, re.M) + re.findall(r"^\*\*(.+?)\*\*", text, re.M)
    return [s.replace("`", "").strip().lower() for s in found]


def test_every_quoted_section_of_a_doc_exists():
    """`docs/performance.md, "Compute precision"` (in a doc, a docstring, a config file) names the start of one of
    that page's headings or bold paragraph leads."""
    stale = []
    for source in [*PAGES, *sorted(REPO.glob("avatargen/**/*.py")), *sorted(REPO.glob("conf/**/*.yaml")),
                   *sorted(REPO.glob("tests/**/*.py")), *sorted(REPO.glob("benchmarks/**/*"))]:  # fmt: skip
        if source.suffix not in (".md", ".py", ".yaml", ".sh") or source == Path(__file__):
            continue
        for page, section in SECTION_REFERENCE.findall(source.read_text()):
            if (REPO / page).is_file() and not any(h.startswith(section.lower()) for h in _sections(REPO / page)):
                stale.append(f'{_rel(source)}: {page}, "{section}"')
    assert not stale, "\n".join(sorted(set(stale)))


# --- config keys ------------------------------------------------------------------------------------------------------


def _leaves(node: dict, prefix: str = "") -> set[str]:
    found = set()
    for key, value in node.items():
        if isinstance(value, dict):
            found |= _leaves(value, f"{prefix}{key}.")
        elif not (value is None and key in ("wan", "liveavatar")):  # a family's section, null for the others
            found.add(f"{prefix}{key}")
    return found


@lru_cache(maxsize=1)
def schema_keys() -> frozenset[str]:
    """Every key of the schema: the native model's, the Wan family's and LiveAvatar's sections together."""
    trees = [OmegaConf.to_container(load_config(o)) for o in ([], ["model=infinitetalk"], ["model=liveavatar"])]
    return frozenset(set.union(*(_leaves(t) for t in trees)))


def documented_keys() -> set[str]:
    """The keys docs/configuration.md's reference tables name: each row's first cell (`a`, `b` pairs included),
    under its section heading; a `x.*` row documents the sub-keys named in its meaning cell."""
    keys: set[str] = set()
    section = None
    for line in (REPO / "docs" / "configuration.md").read_text().splitlines():
        heading = re.match(r"^#{3,4}\s+`([\w.]+?)(?:\.\*)?`", line)
        if heading:
            section = heading.group(1)
            continue
        if line.startswith("### top level"):
            section = ""
            continue
        if section is None or not line.startswith("| `"):
            continue
        first, meaning = line.split("|")[1], line.split("|")[3]
        for name in re.findall(r"`([\w.*]+)`", first):
            prefix = f"{section}.{name}" if section else name
            if name.endswith(".*"):
                keys |= {f"{prefix[:-2]}.{sub}" for sub in re.findall(r"`(\w+)`", meaning)}
            else:
                keys.add(prefix)
    return keys


def test_configuration_md_documents_exactly_the_schemas_keys():
    documented, schema = documented_keys(), schema_keys()
    assert documented - schema == set(), f"documented but not in the schema: {sorted(documented - schema)}"
    assert schema - documented == set(), f"in the schema but not in docs/configuration.md: {sorted(schema - documented)}"


def _is_package_module(dotted: str) -> bool:
    """`runtime.placement.place` names avatargen.runtime.placement's function, not a config key."""
    parts = dotted.split(".")
    for n in range(len(parts) - 1, 0, -1):
        try:
            if importlib.util.find_spec(f"avatargen.{'.'.join(parts[:n])}") is not None:
                return True
        except ModuleNotFoundError:  # a parent that is no package
            continue
    return False


def test_every_config_key_the_docs_name_exists():
    """A backticked `section.key` (or `section.key=value`: the key; its value may be an example of a bad one)
    anywhere in the docs is a real key; file names (`model.yaml`) and package modules (`runtime.placement.place`)
    are not keys."""
    schema, unknown = schema_keys(), []
    for page in PAGES:
        for span in INLINE.findall(page.read_text()):
            span = span.strip()
            if not re.fullmatch(rf"(?:{'|'.join(SECTIONS)})\.[\w.*]+(=\S+)?", span):
                continue
            key = span.split("=", 1)[0]
            if re.search(r"\.(yaml|py|safetensors|json|pth)$", key) or _is_package_module(key):
                continue
            pattern = re.compile(re.escape(key).replace(r"\*", r"[\w.]+"))
            if not any(pattern.fullmatch(k) or k.startswith(f"{key}.") for k in schema):
                unknown.append(f"{_rel(page)}: `{span}`")
    assert not unknown, "\n".join(unknown)
