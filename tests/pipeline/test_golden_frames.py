"""The engine and the families keep the model's frames: short renders of every bundled example and of wan_tiny (N
chunks, and N with I chunks) against the frames recorded before the engine became one (tests/pipeline/golden_frames.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.pipeline.golden_frames import GOLDEN, RUNS, THUMBNAILS, capability, md5s, render_frames, thumbnails

# Within one CPU kernel family the frames are exact. Across families (AVX2 against AVX-512 kernels) they differ by
# rounding: 0.016 grey levels at most over the thumbnails' blocks when measured; a real change moves them by several.
THUMBNAIL_TOLERANCE = 0.5


@pytest.mark.parametrize("run", list(RUNS))
def test_model_frames_are_the_recorded_ones(run: str) -> None:
    frames = render_frames(run)
    exact = json.loads(GOLDEN.read_text()).get(capability(), {})
    if run in exact:
        assert md5s(frames) == exact[run]
    recorded = np.load(THUMBNAILS)[run]
    assert len(frames) == len(recorded)
    assert float(np.abs(thumbnails(frames) - recorded).max()) <= THUMBNAIL_TOLERANCE
