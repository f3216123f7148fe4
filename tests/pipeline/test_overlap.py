"""Overlapped emission (``runtime.overlap``): segments reach the sinks from a second thread while the next chunks
generate, and a user sees the same video, the same errors and the same resume points as without it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import soundfile as sf
import torch

from avatargen.config.loader import load_config, to_config
from avatargen.io.audio import AudioFileSource
from avatargen.io.image import load_reference
from avatargen.families.tiny.build import build_modules
from tests.conftest import engine_of
from avatargen.pipeline.build import pipeline_for
from avatargen.pipeline.run import RenderRun
from avatargen.pipeline.checkpoint import RenderCheckpoint
from avatargen.pipeline.overlap import EmitThread, split_threads
from avatargen.pipeline.pipeline import Pipeline
from avatargen.pipeline.schedule import checkpoint_grid
from tests.conftest import FrameList, REPO, write_face_png, write_speechlike_wav

CPU = torch.device("cpu")


class ThreadedFrames(FrameList):
    """Keeps every batch and the thread that handed it over; fails at batch ``fail_at`` when given."""

    def __init__(self, fail_at: int | None = None) -> None:
        super().__init__()
        self.threads: list[str] = []
        self.fail_at = fail_at

    def write(self, frames: np.ndarray) -> None:
        self.threads.append(threading.current_thread().name)
        if len(self.threads) == self.fail_at:
            raise OSError("No space left on device")
        super().write(frames)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    wave, rate = sf.read(REPO / "examples" / "speech_1.flac", dtype="float32")
    audio = tmp_path_factory.mktemp("overlap") / "speech.wav"
    sf.write(audio, wave[: 2 * rate], rate)  # 2 s: 50 frames, 4 N chunks, 3 I chunks
    config = to_config(load_config([]))
    models = build_modules(config, CPU)
    square = load_reference(REPO / "examples" / "avatar_1.png", config.model.image_size, config.pipeline.image_fit.value).square
    return config, models, square, audio


def _render(setup, overlap: bool, sink: ThreadedFrames, **options) -> Pipeline:
    config, models, square, audio = setup
    pipeline = pipeline_for(config, models, engine_of(config), overlap=overlap)
    source = AudioFileSource(audio, config.model.sample_rate)
    try:
        pipeline.render(square, source, [sink], run=RenderRun(**options))
    finally:
        source.close()
    return pipeline


def test_overlapped_segments_come_from_a_second_thread_and_resume_to_the_same_frames(setup, monkeypatch) -> None:
    torch.set_num_threads(2)
    config = setup[0]
    saved: list[RenderCheckpoint] = []

    def keep(checkpoint: RenderCheckpoint) -> None:  # saved to disk in a render: a copy of every tensor
        tensors, meta = checkpoint.to_tensors()
        saved.append(RenderCheckpoint.from_tensors({k: v.clone() for k, v in tensors.items()}, meta))

    grid = checkpoint_grid(pipeline_for(config, setup[1], engine_of(config)).schedule, config.pipeline.n_chunk_frames)  # every N chunk
    inline, overlapped = ThreadedFrames(), ThreadedFrames()
    _render(setup, False, inline)
    _render(setup, True, overlapped, checkpoints=grid, on_checkpoint=keep)
    assert set(inline.threads) == {"MainThread"}
    # The render's first frame reaches the sinks alone, before the rest of its segment is upscaled and decoded.
    assert len(inline.parts[0]) == 1 and len(overlapped.parts[0]) == 1 and len(inline.parts[1]) > 1
    # The first segment with every thread (the time to the first frame), the rest from the emitting thread.
    first = overlapped.threads.count("MainThread")
    assert set(overlapped.threads[first:]) == {"avatargen-emit"}
    assert sum(len(part) for part in overlapped.parts[:first]) == 14  # N0's body, before its seam (16 - 4 / 2)
    assert torch.get_num_threads() == 2  # the split ends with the render
    # One thread's float sums instead of two's: a rounding step in a few pixels, as runtime.threads=1 gives.
    diff = np.abs(overlapped.video().astype(int) - inline.video().astype(int))
    assert diff.max() <= 1 and np.count_nonzero(diff) < 1e-4 * diff.size, (diff.max(), np.count_nonzero(diff))

    assert [c.frames for c in saved] == [14, 30, 46]  # ends of N bodies: 16 k - 4 / 2
    resumed = ThreadedFrames()
    _render(setup, True, resumed, resume=saved[1])
    assert set(resumed.threads) == {"avatargen-emit"}  # a resumed render splits the threads from its start
    np.testing.assert_array_equal(resumed.video(), overlapped.video()[saved[1].frames :])  # bit for bit
    assert split_threads(2) == (1, 1) and split_threads(5) == (3, 2) and split_threads(1) == (1, 1)

    # When the emitting thread falls behind, the generating one takes the SR of the next segment: the same frames.
    monkeypatch.setattr(EmitThread, "behind", lambda self: True)
    upscaled_here = ThreadedFrames()
    pipeline = _render(setup, True, upscaled_here)
    np.testing.assert_array_equal(upscaled_here.video(), overlapped.video())
    assert pipeline.stats.stage_s["sr"] > 0


def test_a_sink_failing_on_the_emitting_thread_stops_the_render_with_its_error(setup) -> None:
    torch.set_num_threads(2)
    sink = ThreadedFrames(fail_at=3)
    with pytest.raises(OSError, match="No space left"):
        _render(setup, True, sink)
    assert len(sink.threads) == 3  # nothing reached the sink after the failing batch
    assert not [t for t in threading.enumerate() if t.name == "avatargen-emit"]
    assert torch.get_num_threads() == 2


def test_a_render_keeps_its_threads_and_overlap_while_its_models_load_on_a_worker(tmp_path) -> None:
    """The models load on a worker thread beside the main thread's work on the picture; the worker's probes set torch's
    threads to 1 while they time a core, and a thread's first read of its count is torch's process-wide one. A main
    thread that first read it in that window rendered on one thread with no overlapped emission (RTF 0.50 against
    0.30 on a cartoon). Here the worker sets 1 and keeps it, and the main thread reads only after it did: a fresh
    process, as the CLI starts one."""
    write_face_png(tmp_path / "face.png")
    write_speechlike_wav(tmp_path / "speech.wav", 1.0)
    script = f"""
import json, threading, torch
from pathlib import Path
found = []  # torch's own count for this process, read on a thread of its own: this one has not read it yet
reader = threading.Thread(target=lambda: found.append(torch.get_num_threads()))
reader.start(), reader.join()
threads = found[0]
import avatargen.render.session as session
from avatargen.config.loader import load_config
from avatargen.render import RenderRequest, render

loaded, early, read = threading.Event(), session.load_models_early, session.open_picture
def load_models_early(*args):
    torch.set_num_threads(1)  # as a probe does, held
    loaded.set()
    early(*args)
def open_picture(*args, **kwargs):
    loaded.wait(60)
    return read(*args, **kwargs)
session.load_models_early, session.open_picture = load_models_early, open_picture
folder = Path({str(tmp_path)!r})
stats = render(RenderRequest(image=folder / "face.png", audio=folder / "speech.wav", output=folder / "out.mp4"),
               load_config(["model.weights=random"]), warn=lambda m: None)
print(json.dumps({{"overlap": stats["overlap"], "kept": torch.get_num_threads() == threads, "threads": threads}}))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    if report["threads"] < 2:
        pytest.skip("overlapped emission needs torch on two threads or more")
    assert report["overlap"] and report["kept"], report
