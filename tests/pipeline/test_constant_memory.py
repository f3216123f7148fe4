"""Memory does not grow with the duration.

The fast test holds what a render keeps alive: every tensor reachable while a segment is handed to the sinks, the
same at the end of a render as after its first chunks. The slow one (run by .ci/run, docs/reliability.md) measures the
process: benchmarks/memory/render_durations.py measures the real pair (30 s and 10 min, trained model); it guards the same
ratio with a shorter pair so a regression shows up without an hour of CPU.
"""

from __future__ import annotations

import gc
import json

import numpy as np
import pytest
import torch

from tests.conftest import FAST, engine_of, run_cli, write_face_png, write_speechlike_wav


def _live_tensors() -> tuple[int, int]:
    """(count, bytes of their storages) of the tensors alive in this process, parameters left out."""
    count = size = 0
    for obj in gc.get_objects():
        kind = type(obj)  # not isinstance: that reads __class__, which some deprecated torch objects warn about
        if issubclass(kind, torch.Tensor) and not issubclass(kind, torch.nn.Parameter):
            count += 1
            size += obj.untyped_storage().nbytes()
    return count, size


class LiveTensorSink:
    """A sink that counts the live tensors each time frames reach it: the render's whole working set at that
    moment (its rolling state, the decoder's cache, the chunk in flight)."""

    def __init__(self) -> None:
        self.samples: list[tuple[int, int, int]] = []  # (frames so far, tensors, bytes)
        self.frames = 0

    def write(self, frames: np.ndarray) -> None:
        self.frames += len(frames)
        self.samples.append((self.frames, *_live_tensors()))


def test_what_a_render_keeps_alive_is_the_same_at_its_end_as_after_its_first_chunks(tmp_path):
    from avatargen.config.loader import load_config, to_config
    from avatargen.io.audio import AudioFileSource
    from avatargen.io.image import load_reference
    from avatargen.families.tiny.build import build_modules
    from avatargen.pipeline.build import pipeline_for
    from avatargen.threads import torch_threads

    config = to_config(load_config([*FAST, "pipeline.composite=false"]))  # the model's frames, 4 at a time
    models = build_modules(config, torch.device("cpu"))
    square = load_reference(write_face_png(tmp_path / "face.png"), config.model.image_size, "crop").square
    source = AudioFileSource(write_speechlike_wav(tmp_path / "a.wav", 4.0), config.model.sample_rate)
    sink = LiveTensorSink()
    try:
        with torch_threads(1):
            pipeline_for(config, models, engine_of(config), overlap=False).render(square, source, [sink])
    finally:
        source.close()
    assert sink.frames == 100
    # From the third N chunk on (frame 32) the schedule is in its steady state: N chunk, I chunk, emitted segment.
    steady = [(tensors, size) for frames, tensors, size in sink.samples if frames > 32]
    early, late = steady[: len(steady) // 3], steady[-len(steady) // 3 :]
    assert max(t for t, _ in late) <= max(t for t, _ in early), sink.samples  # no tensor kept per chunk
    assert max(s for _, s in late) <= max(s for _, s in early), sink.samples  # nor a byte more


@pytest.mark.slow
def test_resident_memory_is_the_same_for_a_short_and_a_9x_longer_render(tmp_path):
    image = write_face_png(tmp_path / "face.png")
    reports: dict[int, list[dict]] = {}
    # The short render's RSS at its end varies by ~2 % from run to run (414.6-423.2 MB in three runs on the 2-core
    # CI machine, the long one's 421.3-423.5): the larger of two short runs is the baseline.
    for seconds in (10, 10, 90):
        audio = write_speechlike_wav(tmp_path / f"a{seconds}.wav", seconds)
        result = run_cli("render", "-i", str(image), "-a", str(audio), "-o", str(tmp_path / f"o{seconds}.mp4"),
                         "--json", "-q", *FAST, "pipeline.sampling_steps=1", "runtime.overlap=true",
                         timeout=1200)  # overlapped as a default render on 2 cores is  # fmt: skip
        assert result.returncode == 0, result.stderr
        reports.setdefault(seconds, []).append(json.loads(result.stdout))
        assert reports[seconds][-1]["overlap"] is True
    long = reports[90][0]
    short_peak = max(r["peak_rss_mb"] for r in reports[10])
    short_end = max(r["rss_end_mb"] for r in reports[10])
    # The peak is reached while the first chunks run (model build, first activations): its run-to-run noise is about
    # 2 %, hence 3 % here; the benchmark's 30 s vs 10 min pair measured +0.4 %.
    assert long["peak_rss_mb"] <= short_peak * 1.03, (reports[10], long)
    # What the render holds after its last segment must not creep up (the untrimmed heap grew ~25 MB per 6000 frames).
    assert long["rss_end_mb"] <= short_end * 1.02, (reports[10], long)
