"""One encode, several outputs: the tee muxer's file and HLS outputs, whatever the folder is called."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from avatargen.errors import BadInputError
from avatargen.io.encoder import Encoder
from avatargen.io.outputs import parse_publish_target
from tests.ffmpeg_probe import decode_frames, probe


def gradient(count: int) -> np.ndarray:
    return np.stack([np.full((64, 64, 3), 4 * i, np.uint8) for i in range(count)])


@pytest.mark.parametrize("folder", ["plain", "with space: colon [and] 'quote' | bar"])
def test_hls_and_file_get_the_same_frames_whatever_the_folder_name(tmp_path, folder):
    playlist = tmp_path / folder / "live.m3u8"
    hls = parse_publish_target(str(playlist), segment_s=1.0, hls_window=0)
    with Encoder(tmp_path / folder / "out.mp4", 64, 64, 25, None, outputs=[hls]) as writer:
        writer.write(gradient(60))
    segments = sorted(playlist.parent.glob("live_*.ts"))
    assert [s.name for s in segments] == ["live_00000.ts", "live_00001.ts", "live_00002.ts"]
    assert "#EXT-X-ENDLIST" in playlist.read_text()
    from_segments = np.concatenate([decode_frames(s) for s in segments])
    np.testing.assert_array_equal(from_segments, decode_frames(tmp_path / folder / "out.mp4"))


def test_a_sliding_hls_window_keeps_disk_use_constant(tmp_path):
    playlist = tmp_path / "live.m3u8"
    hls = parse_publish_target(str(playlist), segment_s=1.0, hls_window=2)
    with Encoder(None, 64, 64, 25, None, outputs=[hls], gop_seconds=1.0) as writer:
        writer.write(gradient(60))
        writer.write(gradient(60))
    assert len(list(tmp_path.glob("live_*.ts"))) <= 3  # the two listed and at most one being deleted
    assert playlist.read_text().count("#EXTINF") == 2
    assert probe(tmp_path / "live_00004.ts")["frames"] == 20


def test_publish_targets_are_checked_before_rendering(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(BadInputError, match="cannot write the HLS playlist folder"):
        parse_publish_target(str(tmp_path / "file" / "live.m3u8"), 1.0, 0)
    with pytest.raises(BadInputError, match="neither an HLS playlist nor an RTMP URL; .*or webrtc://127.0.0.1:PORT"):
        parse_publish_target(str(tmp_path / "live.mp4"), 1.0, 0)
    assert parse_publish_target("rtmp://127.0.0.1:1935/live/key", 1.0, 0).muxer == "flv"


def test_parts_and_audio_whose_names_look_like_urls_join_into_one_video(tmp_path):
    from avatargen.io.mp4_join import join_parts
    from tests.conftest import write_speechlike_wav

    folder = tmp_path / "it's [a] tee:x|y\nfolder"
    folder.mkdir()
    audio = write_speechlike_wav(folder / "take:1.wav", 2.0)
    parts = []
    for number, start in enumerate((0, 25)):
        part = folder / f"pipe:{number}.mp4"
        with Encoder(folder / f"pipe:{number}.final.mp4", 64, 64, 25, audio, start_frame=start) as writer:
            writer.write(gradient(25))
        (folder / f"pipe:{number}.final.mp4").rename(part)
        parts.append((part, 25))
    joined = folder / "concat:joined.mp4"
    join_parts(parts, audio, joined, 25)
    link = tmp_path / "plain.mp4"
    link.symlink_to(joined)
    info = probe(link)
    assert info["frames"] == 50 and abs(info["audio_duration_s"] - 2.0) < 0.05


@pytest.mark.parametrize("delay", ["file starts late", "track starts late"])
def test_a_resumed_videos_sound_is_where_the_uninterrupted_one_puts_it(tmp_path, delay):
    """The parts of a resumed render are joined under ffmpeg's -copyts, which keeps a file's own start time: an
    MPEG-TS audio file starting at 1.4 s had 1.4 s of silence put in front of its voice; a video's sound track
    delayed against its picture keeps that delay, as the encoder did (``FROM_FILE_START``)."""
    import imageio_ffmpeg

    from avatargen.io.audio import load_audio
    from avatargen.io.mp4_join import join_parts
    from tests.conftest import write_speechlike_wav

    wav = write_speechlike_wav(tmp_path / "voice.wav", 1.6)
    ffmpeg = [imageio_ffmpeg.get_ffmpeg_exe(), "-v", "error"]
    if delay == "file starts late":
        audio = tmp_path / "voice.ts"
        command = [*ffmpeg, "-i", str(wav), "-c:a", "aac", "-output_ts_offset", "1.4", "-f", "mpegts", str(audio)]
    else:
        audio = tmp_path / "voice.mp4"
        command = [*ffmpeg, "-f", "lavfi", "-i", "color=size=32x32:rate=25", "-itsoffset", "0.4", "-i", str(wav),
                   "-map", "0:v", "-map", "1:a", "-t", "2.0", "-c:a", "aac", str(audio)]  # fmt: skip
    subprocess.run(command, check=True)
    heard = load_audio(audio, 16000)  # the timeline the model renders
    frames = round(len(heard) / 16000 * 25)
    whole, parts = tmp_path / "whole.mp4", []
    with Encoder(whole, 64, 64, 25, audio) as writer:
        writer.write(gradient(frames))
    for number, (start, count) in enumerate(((0, 25), (25, frames - 25))):
        with Encoder(tmp_path / f"{number}.mp4", 64, 64, 25, audio, start_frame=start) as writer:
            writer.write(gradient(count))
        parts.append((tmp_path / f"{number}.mp4", count))
    join_parts(parts, audio, tmp_path / "joined.mp4", 25)
    onset = lambda wave: int(np.argmax(np.abs(wave) > 0.05))  # noqa: E731  the first loud sample
    for made in (whole, tmp_path / "joined.mp4"):
        assert abs(onset(load_audio(made, 16000)) - onset(heard)) < 0.02 * 16000, made


def test_mpeg_ts_on_stdout_leaves_with_the_first_frame_not_the_second(tmp_path):
    """A player reading ``-o -`` gets a frame as soon as it is encoded: ffmpeg's tee muxer held each (with the audio)
    until the next came, a frame of latency."""
    audio = tmp_path / "voice.wav"
    sf.write(audio, np.zeros(16000, np.float32), 16000)
    script = (
        "import sys, time, numpy as np\n"
        "from avatargen.io.encoder import Encoder\n"
        "from avatargen.io.outputs import stdout_output\n"
        f"encoder = Encoder(None, 64, 64, 25, {str(audio)!r}, outputs=[stdout_output()])\n"
        "encoder.write(np.full((1, 64, 64, 3), 128, np.uint8))\n"
        "time.sleep(60)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, start_new_session=True)
    try:
        ready, _, _ = select.select([child.stdout], [], [], 30.0)
        assert ready and os.read(child.stdout.fileno(), 188)[:1] == b"\x47", "no MPEG-TS before the second frame"
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
