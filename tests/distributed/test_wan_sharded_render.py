"""`torchrun --nproc-per-node 2 -m avatargen render model=wan_tiny runtime.sequence_parallel=1
runtime.guidance_parallel=false`: the Wan DiT and umT5 FSDP2-sharded over two CPU ranks (gloo), both ranks computing
the whole video, frame for frame the single-process render (seeded random weights on every rank, same threads). The
layouts that split the work: tests/distributed/test_layouts.py."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import FAST, run_cli, write_speechlike_wav
from tests.distributed.torchrun import torchrun
from tests.ffmpeg_probe import decode_frames


@pytest.mark.slow  # a CLI run and a two-rank torchrun: ~22 s on the shared 2-core machine
def test_wan_tiny_sharded_render_frames_equal_the_single_process_render(tmp_path, face_png):
    audio = write_speechlike_wav(tmp_path / "a.wav", 0.6)
    single, sharded = tmp_path / "single.mp4", tmp_path / "out" / "sharded.mp4"
    request = ["render", "-i", str(face_png), "-a", str(audio), "-q", "model=wan_tiny", *FAST]
    result = run_cli(*request, "-o", str(single))
    assert result.returncode == 0, result.stderr
    result = torchrun(*request, "-o", str(sharded), "runtime.sequence_parallel=1", "runtime.guidance_parallel=false")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in sharded.parent.iterdir()) == ["sharded.mp4", "sharded.yaml"]  # rank 0 writes alone
    a, b = decode_frames(single), decode_frames(sharded)
    assert a.shape == b.shape == (15, 64, 64, 3)
    assert np.array_equal(a, b)
