"""Looking up a named spec (``wan_tiny``, ``umt5_xxl``, ...) in a model's table of specs."""

from __future__ import annotations

from typing import Mapping, TypeVar

Spec = TypeVar("Spec")


def lookup_spec(specs: Mapping[str, Spec], name: str, kind: str) -> Spec:
    """``specs[name]``; ValueError naming the ``kind`` of spec and the choices if ``name`` is unknown."""
    if name not in specs:
        raise ValueError(f"unknown {kind} spec {name!r}; choose one of {sorted(specs)}")
    return specs[name]
