"""What ``avatargen eval`` reads of a video before it measures: its shown size (a phone video's rotation applied)
and a frame too small to hold a face refused in one line."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from avatargen.errors import BadInputError
from avatargen.eval.video import analysis_size, iter_frames, probe_video
from avatargen.io.ffmpeg import ffmpeg_exe


def _video(path, size: str, *extra: str):
    subprocess.run([ffmpeg_exe(), "-v", "error", "-y", "-f", "lavfi", "-i", f"testsrc=size={size}:rate=25:duration=0.4",
                    "-c:v", "libx264", "-pix_fmt", "yuv420p", *extra, str(path)], check=True)  # fmt: skip
    return path


def test_a_phone_video_stored_sideways_is_measured_upright(tmp_path):
    # stored 96x160 with a display rotation of -90 degrees: shown 160x96; eval read 96x160 and squeezed every frame
    # into it, so no face was found in a phone video
    stored = _video(tmp_path / "stored.mp4", "96x160")
    turned = tmp_path / "turned.mp4"
    subprocess.run([ffmpeg_exe(), "-v", "error", "-y", "-display_rotation", "-90", "-i", str(stored), "-c", "copy",
                    str(turned)], check=True)  # fmt: skip
    info = probe_video(turned)
    assert (info.width, info.height) == (160, 96)
    frame = next(iter_frames(turned, analysis_size(info)))
    assert frame.shape == (96, 160, 3)
    upright = next(iter_frames(stored, (96, 160)))
    turned_back = min(np.abs(np.rot90(upright, k).astype(int) - frame.astype(int)).mean() for k in (1, 3))
    assert turned_back < 4  # the same pixels, turned, not squeezed


@pytest.mark.parametrize("size", ["32x32", "200x40", "2x2"])
def test_a_video_too_small_to_hold_a_face_is_one_line(tmp_path, size):
    # 32x32 crashed in the detector ("cannot reshape array"); 2x2 was said not to state its frame size
    video = _video(tmp_path / "small.mp4", size, "-vf", "format=yuv444p", "-pix_fmt", "yuv444p")
    width, height = size.split("x")
    with pytest.raises(BadInputError, match=rf"is {width}x{height}, too small to hold a face; give a video of"):
        probe_video(video)
