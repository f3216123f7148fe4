"""Imports flow one way: no layer of avatargen imports a higher one, and no two modules import each other.

The layers, lowest first (docs/architecture.md): a new model goes in ``models/``, an offload policy in
``runtime/``, an output in ``io/``; each of them may only reach down.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "avatargen"

LAYERS = [
    {"errors", "interrupts", "threads", "numeric"},
    {"models"},
    {"config", "sampling", "face", "compose"},
    {"runtime"},
    {"modules"},
    {"io"},
    {"stages", "data"},
    {"pipeline"},
    {"families"},
    {"resume", "render", "bulk", "progress", "eval", "agents"},
    {"cli", "doctor", "torchrun", "__main__", "__init__"},
]
LAYER_OF = {name: level for level, names in enumerate(LAYERS) for name in names}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports(path: Path) -> set[str]:
    """Every avatargen module ``path`` imports, at the top or inside a function; ``from avatargen.face import domain``
    counts as importing ``avatargen.face.domain`` (the submodule), not the package."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            submodules = {f"{node.module}.{alias.name}" for alias in node.names}
            found.update({name for name in submodules if _is_module(name)} or {node.module})
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name == "avatargen" or name.startswith("avatargen.")}


def layer(module: str) -> int:
    parts = module.split(".")
    return LAYER_OF[parts[1]] if len(parts) > 1 else LAYER_OF["__init__"]


def graph() -> dict[str, set[str]]:
    return {module_name(path): imports(path) for path in PACKAGE.rglob("*.py")}


def test_every_top_level_part_has_a_layer():
    names = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    assert names <= set(LAYER_OF), names - set(LAYER_OF)


def test_no_module_imports_a_higher_layer():
    upward = [
        f"{module} (layer {layer(module)}) imports {target} (layer {layer(target)})"
        for module, targets in sorted(graph().items())
        for target in sorted(targets)
        if layer(target) > layer(module)
    ]
    assert not upward, "\n".join(upward)


def test_no_import_cycles():
    edges = graph()

    def resolve(name: str) -> str | None:  # "avatargen.families.tiny.models.vae.DecoderCache"-style names do not occur: modules only
        return name if name in edges else None

    cycles = []
    for start in edges:
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for target in map(resolve, edges[node]):
                if target is None or target == "avatargen":
                    continue
                if target == start:
                    cycles.append(" -> ".join([*path, start]))
                elif target not in seen:
                    seen.add(target)
                    stack.append((target, [*path, target]))
    # A package importing its own submodules (``__init__`` re-exports) is not a cycle of the layers.
    real = [c for c in cycles if not _package_reexport(c)]
    assert not real, "\n".join(sorted(set(real))[:10])


def _package_reexport(cycle: str) -> bool:
    nodes = cycle.split(" -> ")
    return any(b.startswith(a + ".") or a.startswith(b + ".") for a, b in zip(nodes, nodes[1:]))


BUILT_ON = {"liveavatar": ("wan",)}  # family -> the families whose parts it imports


def test_families_are_a_layer_of_their_own() -> None:
    """A family imports no other family, and shared code imports none (the registry names them as strings); a family
    built on another model's parts imports them from their family (``BUILT_ON``: LiveAvatar is Wan2.2-S2V, whose VAE,
    umT5, layers and loaders are the Wan family's)."""
    edges = graph()

    def family(module: str) -> str | None:
        parts = module.split(".")
        return parts[2] if len(parts) > 2 and parts[1] == "families" else None

    crossing = [
        f"{module} imports {target}"
        for module, targets in sorted(edges.items())
        for target in sorted(targets)
        if family(target) is not None and family(module) != family(target)
        and family(target) not in BUILT_ON.get(family(module) or "", ())
    ]
    assert not crossing, "\n".join(crossing)


# -- imports by a name read at run time --------------------------------------------------------------------------

REGISTRY = PACKAGE / "config" / "families.py"  # load_object: the one place avatargen imports a module by its name
CONFIG_HALF = ("config", "params")  # a family's modules the loader reaches (layer 2: no torch, nothing above)


def _dynamic_imports(path: Path) -> list[str]:
    """Calls that import a module by a name computed at run time: ``import_module(x)`` / ``__import__(x)`` with ``x``
    not a string literal, or with a literal naming an avatargen module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in ("import_module", "__import__") and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
                    arg = arg.values[0]  # f"mediapipe.{part}": its fixed start names the package
                literal = isinstance(arg, ast.Constant) and isinstance(arg.value, str)
                if not literal or arg.value.startswith("avatargen"):
                    found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    return found


def test_modules_are_imported_by_name_only_in_the_registry() -> None:
    """Outside ``config/families.py`` every avatargen module is imported by an import statement, which the graph above
    sees (the doctor probes third-party packages by name: their names are literals in its table)."""
    found = [hit for path in PACKAGE.rglob("*.py") if path != REGISTRY for hit in _dynamic_imports(path)]
    assert {hit.split(":")[0] for hit in found} <= {"avatargen/doctor.py"}, found


def _named_modules() -> list[tuple[str, str]]:
    """(module, what names it) for every "package.module:ATTR" in the registry and in the families' configs."""
    from avatargen.config.families import FAMILIES, family_named

    named = [(reference.partition(":")[0], f"FAMILIES['{name}']") for name, reference in FAMILIES.items()]
    named += [(family_named(name).engine.partition(":")[0], f"the {name} family's engine") for name in FAMILIES]
    return named


def _top_level_imports(path: Path) -> set[str]:
    """The avatargen modules ``path`` imports at its top (an import inside a function runs only when called)."""
    top = ast.Module(body=[n for n in ast.parse(path.read_text()).body if isinstance(n, (ast.Import, ast.ImportFrom))],
                     type_ignores=[])  # fmt: skip
    scratch = PACKAGE.parent / ".import-graph-scratch.py"
    try:
        scratch.write_text(ast.unparse(top))
        return imports(scratch)
    finally:
        scratch.unlink(missing_ok=True)


def test_what_the_registry_names_exists_and_a_config_half_stays_in_the_config_layer() -> None:
    """Each name the registry and the families' configs give is a module of this tree; a family's config half
    (``families/<name>/config.py``, ``params.py``) imports nothing above the config layer at its top, so that loading
    a config pulls in no engine (what its checks need of the models they import when they run)."""
    edges = graph()
    for module, named_by in _named_modules():
        assert module in edges, f"{named_by} names '{module}', which is not a module of avatargen"
    halves = [p for p in PACKAGE.glob("families/*/*.py") if p.stem in CONFIG_HALF]
    assert halves, "no family config modules found"
    above = [f"{module_name(path)} imports {target}" for path in halves for target in sorted(_top_level_imports(path))
             if target.split(".")[-1] not in CONFIG_HALF and layer(target) > LAYER_OF["config"]]
    assert not above, "\n".join(above)


def test_loading_the_default_config_imports_no_torch() -> None:
    """``avatargen config`` and a config check of the bundled model start without torch (~1 s on a 2-core CPU)."""
    import subprocess
    import sys

    code = ("import sys; from avatargen.config.loader import load_config; load_config([]); "
            "load_config(['pipeline=preview', 'runtime=cpu']); print('torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PACKAGE.parent, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "False", result.stdout + result.stderr
