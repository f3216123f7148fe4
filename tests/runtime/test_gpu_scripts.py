"""The GPU benchmarks run on a CPU too (their smoke modes), so a change to the code they drive cannot break them
unseen: a GPU is lent to this project's checks only now and then, and a script found broken there costs that time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run(script: str, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu" / script), *args], capture_output=True, text=True,
                          cwd=REPO, timeout=timeout)  # fmt: skip


def test_gpu_offload_smoke_renders_through_each_avatargen_placement(tmp_path):
    out = tmp_path / "offload.json"
    result = run("gpu_offload.py", "--smoke", "--configs", "ab", "--no-memory-check", "--json-out", str(out))
    assert out.exists(), result.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert {key: rows[key].get("error") for key in "ab"} == {"a": None, "b": None}
    assert rows["a"]["ok"] and rows["b"]["ok"]


def test_gpu_wan_runs_a_policy_and_records_a_child_that_runs_out_of_time(tmp_path):
    out = tmp_path / "wan.json"
    result = run("gpu_wan.py", "--model", "wan_tiny", "--device", "cpu", "--policies", "block", "--clips", "1",
                 "--steps", "1", "--json-out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    (row,) = json.loads(out.read_text())
    assert row["policy"] == "block" and row["clips"] == 1 and row["s_per_step"] > 0 and row["offload"]["loads"] > 0
    result = run("gpu_wan.py", "--model", "wan_tiny", "--device", "cpu", "--policies", "none", "--clips", "40",
                 "--timeout-s", "6", "--json-out", str(out))  # fmt: skip (40 clips: minutes on a CPU)
    (row,) = json.loads(out.read_text())
    assert result.returncode == 1 and row["error"] == "timed out after 6 s", row
    assert "most recent call first" in row["stderr"] and 'File "' in row["stderr"]  # the stacks, asked before the kill


def test_gpu_checks_script_parses():
    assert subprocess.run(["bash", "-n", str(REPO / "benchmarks" / "gpu" / "gpu_checks.sh")]).returncode == 0
