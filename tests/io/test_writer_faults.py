"""Encoder under a file-size limit: ffmpeg is killed by SIGXFSZ mid-write, and that must read as a disk-space error."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest

from tests.conftest import REPO

SCRIPT = """
import numpy as np
from avatargen.errors import DiskFullError
from avatargen.io.encoder import Encoder
from avatargen.io.outputs import parse_publish_target
live = [parse_publish_target("{hls}", 0.2, 0)] if {publish} else []
writer = Encoder("{out}", 64, 64, 25, None, gop_seconds=0.2, outputs=live)
try:
    for i in range(2000):
        writer.write(np.random.default_rng(i).integers(0, 256, (4, 64, 64, 3), dtype=np.uint8))
    writer.close()
except DiskFullError as error:
    print("DISKFULL", error)
"""


@pytest.mark.parametrize("publish", [False, True], ids=["file", "file+hls"])
def test_file_size_limit_kills_ffmpeg_and_reads_as_disk_full(tmp_path, publish):
    # With a live output too, the file's failure must still read as a full disk (exit 2), not a publish failure.
    out = tmp_path / "o.mp4"

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", SCRIPT.format(out=out, hls=tmp_path / "hls" / "live.m3u8", publish=publish)], capture_output=True, text=True, env=env,
                            preexec_fn=limit, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("DISKFULL") and "file-size limit" in result.stdout, result.stdout
    assert not out.exists()
