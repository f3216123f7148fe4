"""Imports flow one way: no layer of avatargen imports a higher one, and no two modules import each other.

The layers, lowest first (docs/architecture.md): a new model goes in ``models/``, an offload policy in
``runtime/``, an output in ``io/``; each of them may only reach down.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "avatargen"

LAYERS = [
    {"errors", "threads", "numeric"},
    {"models"},
    {"config", "sampling", "face", "compose"},
    {"runtime"},
    {"modules"},
    {"io"},
    {"stages", "data"},
    {"pipeline"},
    {"families"},
    {"resume", "render", "bulk", "progress", "eval", "agents"},
    {"cli", "doctor", "__main__", "__init__"},
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
