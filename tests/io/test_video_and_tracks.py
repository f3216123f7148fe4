"""Inputs of dubbing and of two speakers: a source video read frame by frame (one frame in memory, by timestamp,
upright), several speakers' files as one timeline of tracks, their mix in the MP4, the timeline's running sums."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
import soundfile as sf

from avatargen.errors import BadInputError
from avatargen.io.audio_mix import AudioMix
from avatargen.io.audio_stats import TrackStats
from avatargen.io.audio_tracks import AudioTracksSource
from avatargen.io.encoder import Encoder
from avatargen.io.ffmpeg import ffmpeg_exe
from avatargen.io.video_in import VideoFrames
from avatargen.pipeline.audio_timeline import AudioTimeline
from tests.ffmpeg_probe import probe


def ffmpeg(*args: str) -> None:
    subprocess.run([ffmpeg_exe(), "-v", "error", "-y", *args], check=True)


def numbered_video(path, size="64x48", rate="25", seconds="0.6", extra=()) -> None:
    """Frames whose mean brightness grows with their number (a counter the decoder cannot confuse)."""
    filters = extra or ("-vf", "geq=lum='32+N*8':cb=128:cr=128")
    ffmpeg("-f", "lavfi", "-i", f"color=c=black:s={size}:r={rate}:d={seconds}", *filters,
           "-c:v", "libx264", "-qp", "0", "-pix_fmt", "yuv420p", str(path))  # fmt: skip


def test_frames_come_in_order_one_in_memory_the_last_repeated_past_the_end(tmp_path):
    numbered_video(tmp_path / "v.mp4")  # 15 frames
    video = VideoFrames(tmp_path / "v.mp4", 25)
    assert video.size == (48, 64)
    means = [video.frame(i).mean() for i in (0, 1, 2, 7, 14)]
    assert means == sorted(means) and means[0] < means[1] < means[-1]
    assert video.frames_read == 15  # each frame through the pipe once
    assert np.array_equal(video.frame(40), video.frame(14))  # past the end: the last frame, as the reference
    assert np.array_equal(video.frame(1), VideoFrames(tmp_path / "v.mp4", 25).frame(1))  # an earlier one: reread
    video.close()


def test_a_variable_frame_rate_source_is_read_by_timestamp(tmp_path):
    # a phone-like variable rate: 10 frames 0.1 s apart, but a 0.4 s gap after the fifth (it held still)
    numbered_video(tmp_path / "v.mp4", rate="10", seconds="1",
                   extra=("-vf", "geq=lum='32+N*8':cb=128:cr=128,setpts='PTS-STARTPTS+gt(N,4)*0.3/TB'",
                          "-fps_mode", "vfr"))  # fmt: skip
    video = VideoFrames(tmp_path / "v.mp4", 25)
    levels = [round(video.frame(i).mean()) for i in range(33)]  # 1.3 s at 25 fps
    assert len(set(levels)) == 10 and levels == sorted(levels)  # every source frame, in order
    assert len(set(levels[11:19])) == 1  # the frame shown during the gap (0.44 to 0.72 s) holds
    assert levels.count(levels[0]) in (2, 3)  # the others last 0.1 s: 2.5 render frames each


def test_a_rotated_phone_video_comes_upright(tmp_path):
    numbered_video(tmp_path / "v.mp4")
    ffmpeg("-display_rotation", "90", "-i", str(tmp_path / "v.mp4"), "-c", "copy", str(tmp_path / "rotated.mp4"))
    video = VideoFrames(tmp_path / "rotated.mp4", 25)
    assert video.size == (64, 48) and video.frame(0).shape == (64, 48, 3)


def test_a_file_without_video_says_so_in_one_line(tmp_path):
    sf.write(tmp_path / "speech.wav", np.zeros(1600, np.float32), 16000)
    with pytest.raises(BadInputError, match="has no video stream"):
        VideoFrames(tmp_path / "speech.wav", 25)
    with pytest.raises(BadInputError, match="does not exist"):
        VideoFrames(tmp_path / "missing.mp4", 25)
    with pytest.raises(BadInputError, match="video path '.*' is not a file; give a video file"):
        VideoFrames(tmp_path, 25)
    (tmp_path / "broken.mp4").write_bytes(b"not a video")
    with pytest.raises(BadInputError, match=r"video file '.*broken.mp4' could not be opened by ffmpeg \("):
        VideoFrames(tmp_path / "broken.mp4", 25)


def test_a_4k_source_is_read_at_its_size_one_frame_at_a_time(tmp_path):
    numbered_video(tmp_path / "4k.mp4", size="3840x2160", seconds="0.12")
    video = VideoFrames(tmp_path / "4k.mp4", 25)
    assert video.size == (2160, 3840) and video.frame(2).shape == (2160, 3840, 3)


def _wav(path, seconds, value):
    sf.write(path, np.full(int(16000 * seconds), value, np.float32), 16000)
    return path


@pytest.mark.parametrize("arrangement", ["para", "add"])
def test_two_speakers_share_the_timeline_at_once_or_one_after_the_other(tmp_path, arrangement):
    left, right = _wav(tmp_path / "l.wav", 0.5, 0.25), _wav(tmp_path / "r.wav", 0.3, -0.5)
    source = AudioTracksSource([left, right], 16000, arrangement, block_samples=3000)
    tracks = np.concatenate(list(source))  # (n, 2)
    if arrangement == "para":  # at once: the longer file's length, the shorter one followed by silence
        assert tracks.shape == (8000, 2)
        assert np.allclose(tracks[:, 0], 0.25) and np.allclose(tracks[:4800, 1], -0.5) and not tracks[4800:, 1].any()
    else:  # the first, then the second; each silent while the other talks
        assert tracks.shape == (12800, 2)
        assert np.allclose(tracks[:8000, 0], 0.25) and not tracks[8000:, 0].any()
        assert not tracks[:8000, 1].any() and np.allclose(tracks[8000:, 1], -0.5)
    stats = source.statistics()  # what the whole-file features normalise with, silence included
    for k in range(2):
        assert stats[k].samples == len(tracks)
        assert stats[k].mean == pytest.approx(tracks[:, k].mean(), abs=1e-6)
        assert stats[k].variance == pytest.approx(tracks[:, k].var(), abs=1e-6)


@pytest.mark.parametrize("arrangement,seconds", [("para", 0.5), ("add", 0.8)])
def test_the_mp4_carries_both_speakers_mixed_as_the_model_heard_them(tmp_path, arrangement, seconds):
    left, right = _wav(tmp_path / "l.wav", 0.5, 0.2), _wav(tmp_path / "r.wav", 0.3, 0.2)
    frames = round(seconds * 25)
    with Encoder(tmp_path / "out.mp4", 32, 32, 25, AudioMix((left, right), arrangement)) as writer:
        writer.write(np.zeros((frames, 32, 32, 3), np.uint8))
    info = probe(tmp_path / "out.mp4")
    assert info["frames"] == frames and abs(info["audio_duration_s"] - seconds) < 0.05


def test_the_timeline_keeps_tracks_side_by_side_and_their_running_sums():
    blocks = [np.stack([np.full(700, 0.5), np.full(700, -1.0)], axis=1).astype(np.float32)] * 3
    timeline = AudioTimeline(blocks, 16000, 25, 0)
    window = timeline.samples(-1, 2)  # (3 frames of 640 samples, 2 tracks), zeros before the start
    assert window.shape == (1920, 2) and not window[:640].any() and np.allclose(window[640:, 1], -1.0)
    stats = timeline.statistics()
    assert stats[0].samples == 1400 and stats[0].mean == pytest.approx(0.5) and stats[1].variance == pytest.approx(0.0)
    assert TrackStats.of(np.ones(4)).padded(8).mean == pytest.approx(0.5)
