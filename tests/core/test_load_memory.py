"""Loading holds the weights once: the placement pass never builds a second copy of a checkpointed model.

Runs ``benchmarks/memory/load_scale.py`` on four Wan2.1-1.3B-shaped blocks (404 MiB bf16) in fresh processes and reads its
measured peaks (anonymous memory: the mapped checkpoint's page cache is not the process's). Four blocks, so that a
rank holding the whole model (>= 1.0x) is far from one holding its half plus FSDP's and gloo's own state (~68 MiB:
0.67x); with one block the two would be the same size.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.slow
def test_placement_holds_the_weights_once_and_each_fsdp_rank_only_its_shards(tmp_path):
    script = REPO / "benchmarks" / "memory" / "load_scale.py"
    result = subprocess.run([sys.executable, str(script), "--blocks", "4", "--repeat", "1", "--dir", str(tmp_path)],
                            capture_output=True, text=True, timeout=240)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    model_mb = rows[-1]["model_mb"]
    none = next(r for r in rows if r.get("mode") == "none")
    ranks = [r for r in rows if r.get("mode") == "fsdp"]
    assert none["peak_anon_mb"] - none["base_anon_mb"] <= 1.1 * model_mb, none
    assert len(ranks) == 2 and all(r["held_mb"] <= 0.51 * model_mb for r in ranks), ranks
    # Each rank: its half, plus FSDP's and gloo's own state (~68 MiB), never the whole model.
    assert all(r["peak_anon_mb"] - r["base_anon_mb"] <= min(0.5 * model_mb + 100, 0.8 * model_mb) for r in ranks), ranks
    assert not list(tmp_path.glob("*.safetensors"))  # the benchmark removes its checkpoint
