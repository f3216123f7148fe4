"""AudioFileSource / load_audio: any format, rate and channel count in; the right number of mono samples out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import imageio_ffmpeg
import numpy as np
import pytest
import soundfile as sf

from avatargen.errors import BadInputError
from avatargen.io import ffmpeg
from avatargen.io.audio import AudioFileSource, load_audio

SR = 16000
SECONDS = 1.5


def _write_wav(path: Path, rate: int, channels: int, seconds: float = SECONDS) -> Path:
    t = np.arange(round(seconds * rate)) / rate
    tone = (0.4 * np.sin(2 * np.pi * 330 * t)).astype(np.float32)
    sf.write(path, np.stack([tone] * channels, axis=1), rate)
    return path


def _encode(src: Path, dst: Path) -> Path:
    subprocess.run([imageio_ffmpeg.get_ffmpeg_exe(), "-v", "error", "-y", "-i", str(src), str(dst)], check=True)
    return dst


# Lossy codecs add encoder delay/padding that their containers may not fully describe: a few ms of slack.
@pytest.mark.parametrize(
    "ext, rate, channels, slack_ms",
    [("wav", 8000, 1, 1), ("wav", 48000, 2, 1), ("flac", 22050, 2, 1), ("mp3", 44100, 1, 60),
     ("ogg", 48000, 2, 30), ("m4a", 22050, 1, 60), ("m4a", 44100, 2, 60)],
)  # fmt: skip
def test_decodes_each_format_rate_and_layout_to_mono_at_the_target_rate(
    tmp_path: Path, ext: str, rate: int, channels: int, slack_ms: int
) -> None:
    wav = _write_wav(tmp_path / "src.wav", rate, channels)
    path = wav if ext == "wav" else _encode(wav, tmp_path / f"voice.{ext}")
    audio = load_audio(path, SR)
    assert audio.dtype == np.float32 and audio.ndim == 1
    assert abs(len(audio) - SECONDS * SR) <= slack_ms * SR / 1000 + 2
    assert 0.2 < np.abs(audio).max() < 0.5  # the tone survived, stereo was averaged rather than summed


def test_streams_fixed_size_blocks_with_a_short_last_one(tmp_path: Path) -> None:
    path = _write_wav(tmp_path / "voice.wav", 44100, 2, seconds=2.3)
    with AudioFileSource(path, SR, block_samples=4000) as source:
        blocks = list(source)
        assert source.duration_hint == pytest.approx(2.3, abs=0.01)
    assert [len(b) for b in blocks[:-1]] == [4000] * (len(blocks) - 1)
    assert 0 < len(blocks[-1]) <= 4000
    assert abs(sum(len(b) for b in blocks) - 2.3 * SR) <= 2
    assert all(b.dtype == np.float32 and b.flags.writeable for b in blocks)


def test_iterating_again_restarts_from_the_beginning(tmp_path: Path) -> None:
    source = AudioFileSource(_write_wav(tmp_path / "voice.wav", SR, 1), SR, block_samples=1000)
    first = next(iter(source))
    again = np.concatenate(list(source))
    np.testing.assert_array_equal(again[:1000], first)
    assert len(again) == SECONDS * SR


def test_stopping_early_leaves_no_ffmpeg_process(tmp_path: Path) -> None:
    path = _write_wav(tmp_path / "voice.wav", SR, 1, seconds=30.0)
    with AudioFileSource(path, SR, block_samples=1000) as source:
        next(iter(source))
        proc = source._proc
        assert proc is not None and proc.poll() is None  # decoding is streamed, not done up front
    assert proc.returncode is not None  # killed and reaped: no zombie
    assert not Path(f"/proc/{proc.pid}").exists()


def test_a_decoder_started_ahead_gives_the_same_audio_and_is_stopped_when_never_read(tmp_path: Path) -> None:
    path = _write_wav(tmp_path / "voice.wav", 44100, 2, seconds=30.0)
    with AudioFileSource(path, SR, block_samples=4000) as source:
        expected = np.concatenate(list(source))
        source.start_decoding()
        np.testing.assert_array_equal(np.concatenate(list(source)), expected)  # read from the decoder started ahead
        source.start_decoding()
        ahead = source._started
        assert ahead is not None and ahead.poll() is None
    assert ahead.returncode is not None and not Path(f"/proc/{ahead.pid}").exists()  # never read: killed, reaped


def test_a_header_read_ahead_is_the_one_the_source_takes_unless_the_file_changed(tmp_path, monkeypatch) -> None:
    reads = []
    read = ffmpeg._read_input_info
    monkeypatch.setattr(ffmpeg, "_read_input_info", lambda path: reads.append(path) or read(path))
    path = _write_wav(tmp_path / "voice.wav", 44100, 1, seconds=1.5)
    ffmpeg.read_input_info_ahead(path)  # as a render does while it imports torch
    for _ in range(2):  # a render opens its audio twice (the speech drive's and the model's decoders)
        assert AudioFileSource(path, SR).duration_hint == pytest.approx(1.5, abs=0.01)
    assert reads == [path]  # ffmpeg read the header once, ahead
    ffmpeg.read_input_info_ahead(path)
    _write_wav(path, 44100, 1, seconds=3.0)  # the file changed after the read ahead began: read again
    assert AudioFileSource(path, SR).duration_hint == pytest.approx(3.0, abs=0.01)


def test_a_header_read_ahead_leaves_no_fork_hook_to_be_registered_while_its_thread_starts_ffmpeg(tmp_path) -> None:
    """Its thread starts ffmpeg with a preexec_fn while the main thread imports torch; a module imported meanwhile
    that registers a fork hook pair (concurrent.futures.thread: a lock taken before a fork, released after it) printed
    "Exception ignored ... RuntimeError: release unlocked lock" on the render's stderr (seen in a CI run). Those
    modules are imported with the module that starts the thread: in a fresh interpreter, none is missing then."""
    path = _write_wav(tmp_path / "voice.wav", 44100, 1, seconds=0.5)
    probe = ("import sys\n"
             "from avatargen.io.ffmpeg import FORK_HOOK_MODULES, read_input_info, read_input_info_ahead\n"
             "missing = sorted(set(FORK_HOOK_MODULES) - set(sys.modules))  # before its thread starts a child\n"
             "read_input_info_ahead(sys.argv[1])\n"
             "print(missing, read_input_info(sys.argv[1]).duration_s)\n")  # fmt: skip
    result = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.split() == ["[]", "0.5"], result.stderr


def test_a_bad_file_read_ahead_is_refused_when_it_is_opened_not_before(tmp_path: Path) -> None:
    path = tmp_path / "voice.mp3"
    path.write_bytes(b"definitely not audio " * 50)
    ffmpeg.read_input_info_ahead(path)  # says nothing
    with pytest.raises(BadInputError, match=r"could not be decoded by ffmpeg \(Invalid data found"):
        AudioFileSource(path, SR)


def test_missing_file_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="does not exist"):
        AudioFileSource(tmp_path / "nope.wav", SR)


def test_garbage_file_is_bad_input_with_ffmpegs_reason(tmp_path: Path) -> None:
    path = tmp_path / "voice.mp3"
    path.write_bytes(b"definitely not audio " * 50)
    with pytest.raises(BadInputError, match=r"could not be decoded by ffmpeg \(Invalid data found") as err:
        AudioFileSource(path, SR)
    assert "\n" not in str(err.value)


def test_file_without_audio_stream_is_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "silent.mp4"
    subprocess.run([imageio_ffmpeg.get_ffmpeg_exe(), "-v", "error", "-f", "lavfi", "-i", "color=s=32x32:d=0.2",
                    str(path)], check=True)  # fmt: skip
    with pytest.raises(BadInputError, match="no audio stream"):
        AudioFileSource(path, SR)


def test_zero_length_wav_is_bad_input_when_read(tmp_path: Path) -> None:
    path = tmp_path / "empty.wav"
    sf.write(path, np.zeros((0, 1), np.float32), SR)
    source = AudioFileSource(path, SR)  # the header is valid; emptiness shows only when decoding
    with pytest.raises(BadInputError, match="contains no audio samples"):
        list(source)


def test_zero_byte_file_is_bad_input(tmp_path: Path) -> None:
    (tmp_path / "voice.wav").write_bytes(b"")
    with pytest.raises(BadInputError, match="could not be decoded by ffmpeg"):
        AudioFileSource(tmp_path / "voice.wav", SR)


@pytest.mark.parametrize("ext", ["wav", "flac"])
def test_a_truncated_file_gives_what_decoded_and_reports_the_damage(tmp_path: Path, ext: str) -> None:
    wav = _write_wav(tmp_path / "src.wav", 44100, 2, seconds=3.0)
    full = wav if ext == "wav" else _encode(wav, tmp_path / f"full.{ext}")
    data = full.read_bytes()
    cut = tmp_path / f"cut.{ext}"
    cut.write_bytes(data[: len(data) * 6 // 10 + 1])  # +1: end mid-sample/mid-frame, as an interrupted copy does
    with AudioFileSource(cut, SR) as source:
        samples = np.concatenate(list(source))
        assert source.damage  # never a silently short render: the caller warns with this
    assert 1.0 < samples.size / SR < 2.0


def test_a_wav_written_to_a_pipe_decodes_in_full(tmp_path: Path) -> None:
    # `ffmpeg ... -f wav - | cat > f.wav` leaves 0xFFFFFFFF sizes in the header and a short last packet.
    streamed = tmp_path / "streamed.wav"
    tone = ["-f", "lavfi", "-i", "sine=frequency=300:duration=2", "-ar", "22050"]
    streamed.write_bytes(subprocess.run([imageio_ffmpeg.get_ffmpeg_exe(), "-v", "error", *tone, "-f", "wav", "-"],
                                        capture_output=True, check=True).stdout)  # fmt: skip
    assert load_audio(streamed, SR).size == 2 * SR


@pytest.mark.parametrize("bad", [np.nan, np.inf], ids=["nan", "inf"])
def test_non_finite_samples_are_bad_input_named_as_such_before_any_decoding_for_the_render(tmp_path, bad):
    t = np.arange(2 * SR) / SR
    samples = (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    samples[20000:20010] = bad
    path = tmp_path / "broken.wav"
    sf.write(path, samples, SR, subtype="FLOAT")
    with pytest.raises(BadInputError, match=r"audio file '.*broken.wav' holds NaN or infinite samples \(the first at 1.25 s\)"):
        AudioFileSource(path, SR)  # when the source is opened: a render, or a resume, never meets it


def test_a_wav_cut_at_a_sample_boundary_is_reported_as_damaged(tmp_path):
    wav = _write_wav(tmp_path / "src.wav", 16000, 1, seconds=2.0)
    data = wav.read_bytes()
    cut = tmp_path / "cut.wav"
    cut.write_bytes(data[: 44 + (len(data) - 44) // 2])  # ffmpeg reads a WAV's length from its size: it looks whole
    with AudioFileSource(cut, SR) as source:
        samples = np.concatenate(list(source))
        assert source.damage == "it ends at 1.00 s of the 2.00 s its header gives"
    assert samples.size == SR


def test_a_video_whose_audio_is_shorter_than_its_video_is_not_damaged(tmp_path):
    clip = tmp_path / "clip.mp4"
    subprocess.run([imageio_ffmpeg.get_ffmpeg_exe(), "-v", "error", "-f", "lavfi", "-i", "testsrc=d=3:s=64x64:r=25",
                    "-f", "lavfi", "-i", "sine=d=1.5", "-c:v", "libx264", "-c:a", "aac", str(clip)], check=True)  # fmt: skip
    with AudioFileSource(clip, SR) as source:
        samples = np.concatenate(list(source))
        assert source.damage is None
    assert abs(samples.size / SR - 1.5) < 0.05
