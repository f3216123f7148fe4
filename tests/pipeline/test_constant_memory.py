"""Memory does not grow with the duration (slow: run with `python -m pytest -m slow tests/pipeline`).

benchmarks/render_durations.py measures the real pair (30 s and 10 min, trained model); this guards the same ratio
with a shorter pair so a regression shows up without an hour of CPU.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import FAST, run_cli, write_face_png, write_speechlike_wav

pytestmark = pytest.mark.slow


def test_resident_memory_is_the_same_for_a_short_and_a_9x_longer_render(tmp_path):
    image = write_face_png(tmp_path / "face.png")
    reports = {}
    for seconds in (10, 90):
        audio = write_speechlike_wav(tmp_path / f"a{seconds}.wav", seconds)
        result = run_cli("render", "-i", str(image), "-a", str(audio), "-o", str(tmp_path / f"o{seconds}.mp4"),
                         "--json", "-q", *FAST, "pipeline.sampling_steps=1", "runtime.overlap=true",
                         timeout=1200)  # overlapped as a default render on 2 cores is  # fmt: skip
        assert result.returncode == 0, result.stderr
        reports[seconds] = json.loads(result.stdout)
        assert reports[seconds]["overlap"] is True
    short, long = reports[10], reports[90]
    # The peak is reached while the first chunks run (model build, first activations): its run-to-run noise is about
    # 2 %, hence 3 % here; the benchmark's 30 s vs 10 min pair measured +0.4 %.
    assert long["peak_rss_mb"] <= short["peak_rss_mb"] * 1.03, (short, long)
    # What the render holds after its last segment must not creep up (the untrimmed heap grew ~25 MB per 6000 frames).
    assert long["rss_end_mb"] <= short["rss_end_mb"] * 1.02, (short, long)
