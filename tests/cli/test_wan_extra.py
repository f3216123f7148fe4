"""Without the `wan` extra (transformers), a Wan-family model says in one line which command installs it and exits 2:
a render, a batch row and `avatargen weights check` alike."""

from __future__ import annotations

import json
import os

from tests.conftest import FAST, REPO, run_cli, write_speechlike_wav

INSTALL = "pip install 'avatargen[wan]'"


def _without_transformers(tmp_path) -> dict[str, str]:
    """An environment where `import transformers` fails as it does when the package is not installed."""
    shadow = tmp_path / "shadow"
    (shadow / "transformers").mkdir(parents=True)
    (shadow / "transformers" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'transformers'\", name='transformers')\n"
    )
    return {**os.environ, "PYTHONPATH": f"{shadow}{os.pathsep}{REPO}"}


def _one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("error")]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def test_render_batch_and_weights_check_name_the_wan_extra_and_exit_2(tmp_path, face_png):
    env = _without_transformers(tmp_path)
    audio = write_speechlike_wav(tmp_path / "speech.wav", 0.3)
    out = tmp_path / "out.mp4"

    render = run_cli("render", "-i", str(face_png), "-a", str(audio), "-o", str(out), "model=wan_tiny", *FAST, env=env)
    assert render.returncode == 2 and INSTALL in _one_error_line(render.stderr)
    assert not out.exists()

    weights = tmp_path / "weights"
    weights.mkdir()
    check = run_cli("weights", "check", str(weights), "model=infinitetalk", env=env)
    assert check.returncode == 2 and INSTALL in _one_error_line(check.stderr)

    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text(json.dumps({"image": str(face_png), "audio": str(audio), "output": "row.mp4"}) + "\n")
    batch = run_cli("batch", str(jobs), "--out-dir", str(tmp_path / "out"), "model=wan_tiny", *FAST, env=env)
    assert batch.returncode == 2, batch.stderr
    report = json.loads((tmp_path / "out" / "batch_report.json").read_text())
    assert INSTALL in report["jobs"][0]["error"]
