"""A seeded fuzzer of config overrides: every key of the schema given hostile values (NaN, infinities, 2^63, negative
sizes, deep nesting, interpolations that cannot resolve, huge strings, wrong types), alone or two or three at once,
plus added, removed and malformed keys. Each case is a real ``avatargen render`` (in this process, through the CLI)
of a 0.4-s clip, and must end as the CLI promises: exit 0, or exit 2 with one ``error:`` line, no traceback, and no
partial video or resume state left behind.

Used by tests/config/test_override_fuzz.py (one fast seeded run) and benchmarks/quality/fuzz_overrides.py (the full run).
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from pathlib import Path

import torch
from typer.testing import CliRunner

from avatargen.config.loader import load_config, to_config

HOSTILE = [
    "-1", "0", "-9223372036854775808", "9223372036854775808", "2147483648", "1" + "0" * 30,
    ".nan", ".inf", "-.inf", "1e308", "-1e308", "1e-320", "-0.0",
    "", "x" * 5000, "${oc.env:AVATARGEN_UNSET_VARIABLE}", "${seed}", "${nope.nope}", "../../../etc/passwd",
    "%n%s%d", "tee:x|y", "null", "maybe", "[1, [2]]", "{a: 1}", "[" * 40 + "]" * 40, "{a: " * 40 + "1" + "}" * 40,
    "'quoted'", "\u00e9\u0301", "true",
]  # fmt: skip
# Values that are valid but would make a case slow (a thousand sampling steps, 4096-pixel frames): never drawn.
KEYS_LEFT_ALONE = ("model.weights", "model.checkpoint", "runtime.threads", "runtime.device")
MALFORMED = ["=1", "seed", "seed==1", "+", "~", "~seed", "+seed=1", "+pipeline.nope=1", "nope=1", "pipeline..x=1",
             "+meta.job=42", "+" + ".".join(["a"] * 200) + "=1", "model=" + "x" * 300, "pipeline=nope",
             "seed=${seed}", "output.publish=[" + "a" * 300 + ".m3u8]"]  # fmt: skip


def schema_keys() -> list[str]:
    """Every leaf key of the resolved default config, dotted."""
    keys: list[str] = []

    def walk(node: object, prefix: str) -> None:
        for field in dataclasses.fields(node):
            value = getattr(node, field.name)
            if dataclasses.is_dataclass(value):
                walk(value, f"{prefix}{field.name}.")
            else:
                keys.append(f"{prefix}{field.name}")

    walk(to_config(load_config([])), "")
    return [k for k in keys if k not in KEYS_LEFT_ALONE]


def cases(seed: int, count: int) -> list[list[str]]:
    """``count`` cases of 1-3 overrides, the same for a seed."""
    rng = random.Random(seed)
    keys = schema_keys()
    found = []
    for _ in range(count):
        if rng.random() < 0.1:
            found.append([rng.choice(MALFORMED)])
            continue
        found.append([f"{rng.choice(keys)}={rng.choice(HOSTILE)}" for _ in range(rng.choice((1, 1, 1, 2, 3)))])
    return found


@dataclass
class Outcome:
    overrides: list[str]
    exit_code: int
    lines: list[str]  # stderr lines, notes and warnings left out
    left: list[str]  # what the case left in its folder that it must not: a partial, resume state, a failed output

    @property
    def kept_the_promise(self) -> bool:
        return (self.exit_code in (0, 2) and len(self.lines) <= (0 if self.exit_code == 0 else 1)
                and all(line.startswith("error: ") for line in self.lines) and not self.left)  # fmt: skip


def run_case(overrides: list[str], face: Path, audio: Path, folder: Path) -> Outcome:
    """One render of ``face`` and ``audio`` into ``folder/o.mp4`` with ``overrides``, as the CLI runs it."""
    from avatargen.cli import app

    threads = torch.get_num_threads()
    out = folder / "o.mp4"
    args = ["render", "-i", str(face), "-a", str(audio), "-o", str(out), "-q", "model.weights=random", "runtime.threads=1"]
    try:
        result = CliRunner().invoke(app, [*args, *overrides], catch_exceptions=True)
    finally:
        torch.set_num_threads(threads)  # a case must not change the next one's (or the test session's) threads
    stderr = result.stderr if result.exception is None or isinstance(result.exception, SystemExit) else \
        f"Traceback: {result.exception!r}"  # fmt: skip
    lines = [line for line in stderr.splitlines() if line.strip() and not line.startswith(("note:", "warning:"))]
    left = [p.name for p in folder.iterdir() if p.name.endswith((".partial.mp4", ".resume", ".lock"))]
    if result.exit_code != 0:
        left += [p.name for p in folder.iterdir() if p.name == "o.mp4"]
    return Outcome(overrides, result.exit_code, lines, left)
