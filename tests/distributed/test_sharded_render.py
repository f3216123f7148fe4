"""`torchrun --nproc-per-node 2 -m avatargen render`: FSDP2-sharded over two CPU ranks (gloo), checked against a
single-process render of the same request, and a rank that dies mid-render ending the whole job (with
``model.weights=random``: the seeded init on every rank)."""

from __future__ import annotations

import time

import numpy as np

from tests.conftest import FAST, run_cli, write_speechlike_wav
from tests.distributed.torchrun import torchrun
from tests.ffmpeg_probe import decode_frames, probe


def test_sharded_render_frames_equal_the_single_process_render(tmp_path, face_png):
    audio = write_speechlike_wav(tmp_path / "a.wav", 2.0)
    single, sharded = tmp_path / "single.mp4", tmp_path / "out" / "sharded.mp4"
    # The shipped checkpoint: each rank reads only its rows of every DiT tensor from the memory-mapped files.
    result = run_cli("render", "-i", str(face_png), "-a", str(audio), "-o", str(single), "-q", "runtime.threads=1")
    assert result.returncode == 0, result.stderr
    result = torchrun("render", "-i", str(face_png), "-a", str(audio), "-o", str(sharded), "-q", "runtime.threads=1")
    assert result.returncode == 0, result.stderr
    assert "rank 0:" in result.stderr and "rank 1:" in result.stderr  # each rank logs its CPU placement
    # Only rank 0 touched the output folder: the video, its config, nothing else.
    assert sorted(p.name for p in sharded.parent.iterdir()) == ["sharded.mp4", "sharded.yaml"]
    assert probe(sharded)["frames"] == 50
    a, b = decode_frames(single), decode_frames(sharded)
    assert a.shape == b.shape == (50, 300, 300, 3)  # face_png's size (reference compositing)
    # FSDP's all-gather rebuilds every weight bit for bit and both ranks use the same seeded noise: same frames.
    assert np.array_equal(a, b)


def test_a_rank_failing_mid_render_stops_the_group_with_one_line_from_rank_0(tmp_path, face_png):
    audio = write_speechlike_wav(tmp_path / "a.wav", 2.0)
    out = tmp_path / "o.mp4"
    started = time.monotonic()
    result = torchrun("1", "render", "-i", str(face_png), "-a", str(audio), "-o", str(out), "-q", *FAST,
                      "runtime.dist_timeout_s=60", module="tests.distributed.faulty_rank", timeout=120)  # fmt: skip
    elapsed = time.monotonic() - started
    assert result.returncode != 0
    assert elapsed < 90, elapsed
    lines = [line for line in result.stderr.splitlines() if line.startswith("error: rank 1 of 2 failed")]
    assert len(lines) == 1, result.stderr  # rank 0 names the rank that failed and its error
    assert "test fault on rank 1" in lines[0]
    assert not out.exists()
