"""Encoder: what lands on disk, checked with ffmpeg itself (tests/ffmpeg_probe.py), including after SIGKILL."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from avatargen.errors import BadInputError
from avatargen.io.ffmpeg import FfmpegError
from avatargen.io.encoder import Encoder
from tests.ffmpeg_probe import count_frames, decode_frames, probe, stream_start_times

REPO_ROOT = Path(__file__).resolve().parents[2]
FPS = 25
W, H = 64, 48


def _sine_wav(path: Path, seconds: float, rate: int = 16000, channels: int = 1) -> Path:
    t = np.arange(round(seconds * rate)) / rate
    tone = (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    sf.write(path, np.stack([tone] * channels, axis=1), rate)
    return path


def _frames(start: int, count: int) -> np.ndarray:
    """Frames whose brightness encodes their index, so order and content can be checked after decoding."""
    levels = (np.arange(start, start + count) * 8 % 256).astype(np.uint8)
    return np.broadcast_to(levels[:, None, None, None], (count, H, W, 3)).copy()


@pytest.mark.parametrize("seconds, rate", [(2.0, 16000), (1.52, 44100)])
def test_writes_h264_aac_with_exact_frames_and_matching_durations(tmp_path: Path, seconds: float, rate: int) -> None:
    audio = _sine_wav(tmp_path / "voice.wav", seconds, rate)
    n_frames = round(seconds * FPS)
    with Encoder(tmp_path / "out.mp4", W, H, FPS, audio) as writer:
        writer.write(_frames(0, 10))  # a batch
        for i in range(10, n_frames):
            writer.write(_frames(i, 1)[0])  # and single (H, W, 3) frames
    assert writer.frames_written == n_frames and writer.first_frame_time is not None
    info = probe(tmp_path / "out.mp4")
    assert (info["video_streams"], info["audio_streams"]) == (1, 1)
    assert (info["video_codec"], info["audio_codec"]) == ("h264", "aac")
    assert (info["width"], info["height"]) == (W, H)
    assert info["frames"] == n_frames
    assert abs(info["video_duration_s"] - n_frames / FPS) < 1e-6
    assert abs(info["audio_duration_s"] - info["video_duration_s"]) <= 1 / FPS
    assert not writer.partial_path.exists()


def test_audio_and_video_start_together(tmp_path: Path) -> None:
    audio = _sine_wav(tmp_path / "voice.wav", 1.0)  # loud from the first sample
    with Encoder(tmp_path / "out.mp4", W, H, FPS, audio) as writer:
        writer.write(_frames(0, FPS))
    starts = stream_start_times(tmp_path / "out.mp4")
    assert starts["video"] == 0.0 and starts["audio"] == 0.0
    # AAC encoder priming (1024 samples) must be cut, not played as a silent lead-in that delays the voice.
    decoded = subprocess.run(
        [_ffmpeg(), "-v", "error", "-i", str(tmp_path / "out.mp4"), "-f", "f32le", "-ac", "1", "-ar", "16000", "-"],
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    first_loud = int(np.argmax(np.abs(np.frombuffer(decoded, np.float32)) > 0.05))
    assert first_loud < 16  # 1 ms


def test_decoded_frames_keep_order_and_content(tmp_path: Path) -> None:
    with Encoder(tmp_path / "out.mp4", W, H, FPS, None, crf=10) as writer:
        writer.write(_frames(0, 20))
    decoded = decode_frames(tmp_path / "out.mp4")
    assert decoded.shape == (20, H, W, 3)
    np.testing.assert_allclose(decoded.mean(axis=(1, 2, 3)), _frames(0, 20).mean(axis=(1, 2, 3)), atol=3)
    assert probe(tmp_path / "out.mp4")["audio_streams"] == 0


@pytest.mark.skipif(not Path("/proc/sys/fs/pipe-max-size").exists(), reason="F_SETPIPE_SZ is Linux's")
def test_a_whole_frame_fits_in_the_frame_pipe_at_once(tmp_path: Path) -> None:
    """A 512x512 frame goes to ffmpeg in one write, not in 12 of the default 64 KiB (docs/speed-measures.md)."""
    import fcntl

    from avatargen.io.encoder import FRAME_PIPE_BYTES

    if int(Path("/proc/sys/fs/pipe-max-size").read_text()) < FRAME_PIPE_BYTES:
        pytest.skip("this system caps pipes under 1 MiB")
    with Encoder(tmp_path / "out.mp4", W, H, FPS, None) as writer:
        assert fcntl.fcntl(writer._stdin_fd, 1032) >= FRAME_PIPE_BYTES >= 512 * 512 * 3  # F_GETPIPE_SZ
        writer.write(_frames(0, 5))
    assert count_frames(tmp_path / "out.mp4") == 5


def test_creates_missing_output_folder_and_writes_only_one_file(tmp_path: Path) -> None:
    target = tmp_path / "new" / "deeper" / "clip.mp4"
    with Encoder(target, W, H, FPS, None) as writer:
        assert writer.partial_path == target.parent / "clip.partial.mp4"
        assert writer.partial_path.exists() and not target.exists()
        writer.write(_frames(0, 5))
    assert sorted(p.name for p in target.parent.iterdir()) == ["clip.mp4"]


def test_exception_aborts_keeping_a_playable_partial_file(tmp_path: Path) -> None:
    target = tmp_path / "out.mp4"
    with pytest.raises(KeyboardInterrupt), Encoder(target, W, H, FPS, _sine_wav(tmp_path / "a.wav", 3.0)) as w:
        w.write(_frames(0, 30))
        raise KeyboardInterrupt
    assert not target.exists()
    assert w.abort() == w.partial_path  # idempotent
    assert count_frames(w.partial_path) == 30


def test_odd_size_and_wrong_frames_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="even"):
        Encoder(tmp_path / "out.mp4", 63, 48, FPS, None)
    with Encoder(tmp_path / "out.mp4", W, H, FPS, None) as writer:
        with pytest.raises(ValueError, match="uint8"):
            writer.write(np.zeros((1, H, W, 3), np.float32))
        with pytest.raises(ValueError, match="uint8"):
            writer.write(np.zeros((1, W, H, 3), np.uint8))
        writer.write(_frames(0, 1))


def test_unwritable_output_folder_is_bad_input(tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    with pytest.raises(BadInputError, match="a_file"):
        Encoder(blocker / "out.mp4", W, H, FPS, None)


def test_ffmpeg_failure_reports_its_reason(tmp_path: Path) -> None:
    not_audio = tmp_path / "voice.wav"
    not_audio.write_text("this is not audio")
    writer = Encoder(tmp_path / "out.mp4", W, H, FPS, not_audio)
    with pytest.raises(FfmpegError, match="Invalid data found"):
        for i in range(200):  # ffmpeg exits at startup; the pipe breaks on some write or at close
            writer.write(_frames(i, 1))
        writer.close()
    assert not (tmp_path / "out.mp4").exists()


def test_disk_full_is_reported_as_bad_input(tmp_path: Path) -> None:
    writer = Encoder(tmp_path / "out.mp4", W, H, FPS, None)
    writer.close()
    writer._stderr._lines.append("[out#0/mp4 @ 0x1] Error submitting a packet to the muxer: No space left on device")
    error = writer._error("stopped")  # ffmpeg's own ENOSPC cannot be provoked portably; its message can
    assert isinstance(error, BadInputError) and "disk space" in str(error)


_SLOW_WRITER = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    from avatargen.io.encoder import Encoder

    writer = Encoder(sys.argv[1], 64, 48, 25, sys.argv[2])  # a fragment every 25 frames
    print(writer._proc.pid, flush=True)
    for i in range(100000):
        writer.write(np.full((48, 64, 3), i % 256, np.uint8))
        if i == 40:
            print("wrote 1.6 s", flush=True)
        time.sleep(1 / 25)  # a real-time renderer
    """
)


def test_partial_file_survives_sigkill_of_python_and_ffmpeg(tmp_path: Path) -> None:
    target = tmp_path / "out.mp4"
    audio = _sine_wav(tmp_path / "voice.wav", 60.0)
    _set_child_subreaper(True)  # ffmpeg, orphaned by the kill, is then re-parented to us and reaped, not left a zombie
    child = subprocess.Popen(
        [sys.executable, "-c", _SLOW_WRITER, str(target), str(audio)],
        stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT, start_new_session=True,
    )  # fmt: skip
    ffmpeg_pid = None
    try:
        ffmpeg_pid = int(child.stdout.readline())
        assert child.stdout.readline().strip() == "wrote 1.6 s"
        _wait_for_nonempty(target.parent / "out.partial.mp4")  # the first 1 s fragment; normally already there
    finally:
        # Kill both at once, as an OOM kill or power cut would: ffmpeg never sees stdin close, nothing is finalised.
        if ffmpeg_pid is not None:
            os.kill(ffmpeg_pid, signal.SIGKILL)
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        child.stdout.close()
        if ffmpeg_pid is not None:
            _reap(ffmpeg_pid)
        _set_child_subreaper(False)
    partial = target.parent / "out.partial.mp4"
    assert not target.exists()
    info = probe(partial)
    assert (info["video_codec"], info["audio_codec"]) == ("h264", "aac")
    assert info["frames"] > 0 and info["frames"] % 25 == 0  # whole 1 s fragments; the unfinished one is lost
    decoded = subprocess.run([_ffmpeg(), "-v", "error", "-i", str(partial), "-f", "null", "-"], capture_output=True)
    assert decoded.returncode == 0, decoded.stderr


def _wait_for_nonempty(path: Path, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while path.stat().st_size == 0 and time.monotonic() < deadline:
        time.sleep(0.02)


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass  # reaped by init where subreapers are unsupported


def _set_child_subreaper(enabled: bool) -> None:
    """Linux prctl(PR_SET_CHILD_SUBREAPER); a no-op elsewhere."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, int(enabled), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _ffmpeg() -> str:
    import imageio_ffmpeg

    return imageio_ffmpeg.get_ffmpeg_exe()
