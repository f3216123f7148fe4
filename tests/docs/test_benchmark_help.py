"""Every benchmark the docs cite answers ``--help`` with its usage, from any folder, without running (a script that
imported the test suite's helpers failed outside the checkout's root; one ran its whole benchmark on --help)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import REPO

# One interpreter runs each script as __main__ with --help (torch is imported once, not 43 times).
RUN_EACH = """
import contextlib, io, json, runpy, sys
results, path_before = {}, list(sys.path)
for path in sys.argv[1:]:
    sys.path[:] = path_before  # as if run alone: what an earlier script put on the path or imported is gone
    for name in [name for name in sys.modules if name == "tests" or name.startswith(("tests.", "benchmarks"))]:
        del sys.modules[name]
    sys.argv = [path, "--help"]
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(path, run_name="__main__")
        results[path] = "returned without printing its usage"
    except SystemExit as stop:
        results[path] = "ok" if stop.code in (0, None) and "usage" in out.getvalue() else f"exit {stop.code}"
    except BaseException as error:
        results[path] = f"{type(error).__name__}: {error}"
print(json.dumps(results))
"""


def test_every_benchmark_prints_its_usage_on_help_from_outside_the_checkout(tmp_path):
    scripts = sorted(str(path) for path in (REPO / "benchmarks").glob("*/*.py"))
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}  # as a user runs them
    done = subprocess.run([sys.executable, "-c", RUN_EACH, *scripts], capture_output=True, text=True, timeout=240,
                          cwd=tmp_path, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(results) == len(scripts) > 30
    assert {path: why for path, why in results.items() if why != "ok"} == {}
