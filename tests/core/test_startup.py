"""Start-up cost of a CLI run: a render never imports ``torch._dynamo`` (about a second on these machines), and
validating a Wan config never imports transformers (several seconds).

Building a model on the meta device used to run its initialisers and sin-cos tables through torch's Python meta
kernels, whose first call imports ``torch._dynamo``; config validation and the placement pass both paid for it on
every ``avatargen render`` (docs/performance.md, "Start-up time").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, write_speechlike_wav

# Runs the real CLI in-process; as it exits (an atexit handler: the CLI leaves without the interpreter's teardown),
# reports which torch compiler packages it imported.
DRIVER = """
import atexit, json, runpy, sys

def report():
    loaded = sorted(m for m in sys.modules if m.split(".")[:2] == ["torch", "_dynamo"])
    print(json.dumps({"dynamo": loaded[:3]}), file=sys.__stderr__, flush=True)

atexit.register(report)
sys.argv = ["avatargen", *sys.argv[1:]]
runpy.run_module("avatargen", run_name="__main__")
"""


def test_a_render_with_the_shipped_model_never_imports_torch_dynamo(tmp_path: Path, face_png: Path) -> None:
    audio = write_speechlike_wav(tmp_path / "a.wav", 0.5)
    out = tmp_path / "out.mp4"
    args = ["render", "-i", str(face_png), "-a", str(audio), "-o", str(out), "--quiet", "runtime.threads=1"]
    result = subprocess.run([sys.executable, "-c", DRIVER, *args], capture_output=True, text=True, timeout=120,
                            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    report = json.loads(result.stderr.strip().splitlines()[-1])
    assert result.returncode == 0 and out.stat().st_size > 0, result.stderr
    assert report["dynamo"] == [], f"a render imported {report['dynamo']} (~1 s of start-up)"


def test_checking_a_wan_config_does_not_import_transformers() -> None:
    # `avatargen config model=...` and each `avatargen batch` job row validate against the Wan specs; transformers
    # (seconds to import) is needed only to build the wav2vec2 audio encoder.
    code = ("import sys; from avatargen.config.loader import load_config; "
            "[load_config([f'model={name}']) for name in ('wan_tiny', 'infinitetalk', 'multitalk')]; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'transformers')[:3])")  # fmt: skip
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", result.stdout
