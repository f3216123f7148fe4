"""The engine and the families keep the model's frames: short renders of every bundled example and of wan_tiny (N
chunks, and N with I chunks) against the frames recorded before the engine became one (tests/pipeline/golden_frames.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.pipeline.golden_frames import GOLDEN, RUNS, THUMBNAILS, cpu_kind, md5s, render_frames, thumbnails

# Within one kind of CPU the frames are exact. Across kinds (AVX2 against AVX-512 kernels, an AMD EPYC against an AMX
# Xeon) they differ by rounding: 0.016 grey levels at most over the thumbnails' blocks when measured; a real change
# moves them by several.
THUMBNAIL_TOLERANCE = 0.5


@pytest.mark.parametrize("run", list(RUNS))
def test_model_frames_are_the_recorded_ones(run: str) -> None:
    frames = render_frames(run)
    recorded = np.load(THUMBNAILS)[run]
    assert len(frames) == len(recorded)
    assert float(np.abs(thumbnails(frames) - recorded).max()) <= THUMBNAIL_TOLERANCE
    exact = json.loads(GOLDEN.read_text()).get(cpu_kind(), {})
    if run not in exact:  # said, not passed over: the skip names the command that records this CPU's frames
        pytest.skip(f"thumbnails match; no exact frames of {run} recorded for '{cpu_kind()}' "
                    "(python -m tests.pipeline.golden_frames)")  # fmt: skip
    assert md5s(frames) == exact[run]
