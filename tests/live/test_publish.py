"""Publishing live while rendering, with real receivers: a browser playing HLS, an RTMP ingest, a pipe on stdout."""

from __future__ import annotations

import pytest

import json
import os
import socket
import subprocess
import sys
import time

import imageio_ffmpeg
import numpy as np

from tests.conftest import FAST, REPO, run_cli, write_face_png, write_speechlike_wav
from tests.ffmpeg_probe import decode_frames, probe
from tests.live.harness import HlsBrowser, RtmpIngest, free_port

QUICK = [*FAST, "pipeline.sampling_steps=1"]
FPS = 25


def avatargen(*args: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "avatargen", *args], env=env, **kwargs)


def test_browser_plays_the_hls_stream_before_the_render_ends(tmp_path):
    seconds = 6.0
    image, audio = write_face_png(tmp_path / "face.png"), write_speechlike_wav(tmp_path / "speech.wav", seconds)
    hls = tmp_path / "hls"
    with HlsBrowser(hls) as browser:
        render = avatargen("render", "-i", str(image), "-a", str(audio), "-o", str(tmp_path / "out.mp4"),
                           "--publish", str(hls / "live.m3u8"), "--realtime", "-q", *QUICK,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
        _, stderr = render.communicate(timeout=240)
        ended_at = time.monotonic()
        assert render.returncode == 0, stderr
        first_progress = browser.first_progress_time()
        assert first_progress is not None and first_progress < ended_at - 1.0, browser.summary()
        assert browser.errors() == [], browser.summary()
    playlist = (hls / "live.m3u8").read_text()
    assert "#EXT-X-ENDLIST" in playlist  # closed when the render ended: players stop instead of waiting
    segments = [hls / line for line in playlist.splitlines() if line.endswith(".ts")]
    assert len(segments) == seconds  # one per 1 s keyframe interval
    # The segments are the same encode as the file: together they hold exactly the file's frames.
    assert sum(probe(s)["frames"] for s in segments) == probe(tmp_path / "out.mp4")["frames"] == seconds * FPS


def test_rtmp_ingest_receives_the_render(tmp_path):
    image, audio = write_face_png(tmp_path / "face.png"), write_speechlike_wav(tmp_path / "speech.wav", 3.0)
    received = tmp_path / "received.ts"
    with RtmpIngest(received) as ingest:
        result = run_cli("render", "-i", str(image), "-a", str(audio), "-o", str(tmp_path / "out.mp4"),
                         "--publish", ingest.url, "--json", "-q", *QUICK)  # fmt: skip
        assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["publish"] == [{"target": ingest.url, "kind": "rtmp", "dropped": False, "reason": None}]
    info = probe(received)
    assert (info["video_codec"], info["audio_codec"], info["frames"]) == ("h264", "aac", 75), info
    assert abs(info["audio_duration_s"] - 3.0) < 0.1, info
    np.testing.assert_array_equal(decode_frames(received), decode_frames(tmp_path / "out.mp4"))


def test_a_dead_ingest_is_dropped_and_the_file_goes_on(tmp_path):
    image, audio = write_face_png(tmp_path / "face.png"), write_speechlike_wav(tmp_path / "speech.wav", 2.0)
    dead = f"rtmp://127.0.0.1:{free_port()}/live/key"  # nothing listens there
    result = run_cli("render", "-i", str(image), "-a", str(audio), "-o", str(tmp_path / "out.mp4"),
                     "--publish", dead, "--json", "-q", *QUICK)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"publish target '{dead}' failed (Connection refused); dropped it" in result.stderr
    assert json.loads(result.stdout)["publish"][0]["dropped"] is True
    assert probe(tmp_path / "out.mp4")["frames"] == 50


@pytest.mark.slow  # exit 3 is held by the closed-stdout test in tests/cli/test_never_lose_work.py
def test_a_dead_ingest_stops_the_render_when_configured(tmp_path):
    image, audio = write_face_png(tmp_path / "face.png"), write_speechlike_wav(tmp_path / "speech.wav", 2.0)
    dead = f"rtmp://127.0.0.1:{free_port()}/live/key"
    out = tmp_path / "out.mp4"
    result = run_cli("render", "-i", str(image), "-a", str(audio), "-o", str(out), "--publish", dead, "-q",
                     "output.on_publish_failure=stop", *QUICK)  # fmt: skip
    assert result.returncode == 3, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert lines == [f"error: publish target '{dead}' failed (Connection refused); check that it is reachable, or "
                     "set output.on_publish_failure=drop to keep rendering without it"]  # fmt: skip
    assert "Traceback" not in result.stderr
    assert not out.exists()  # never a broken file under the user's name
    assert (tmp_path / "out.partial.mp4").exists()  # what was rendered is kept, and resumable once the ingest is up
    resumed = run_cli("render", "-i", str(image), "-a", str(audio), "-o", str(out), "-q", "--resume", *QUICK)
    assert resumed.returncode == 0, resumed.stderr
    assert probe(out)["frames"] == 50


@pytest.mark.slow  # a dead ingest being dropped is held by the default test above
def test_an_ingest_that_stops_answering_is_dropped_after_the_timeout(tmp_path):
    image, audio = write_face_png(tmp_path / "face.png"), write_speechlike_wav(tmp_path / "speech.wav", 2.0)
    with socket.socket() as silent:  # accepts the connection, never answers the RTMP handshake
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        url = f"rtmp://127.0.0.1:{silent.getsockname()[1]}/live/key"
        result = run_cli("render", "-i", str(image), "-a", str(audio), "-o", str(tmp_path / "out.mp4"),
                         "--publish", url, "-q", "output.publish_timeout_s=1", *QUICK, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"publish target '{url}' failed (Connection timed out); dropped it" in result.stderr
    assert probe(tmp_path / "out.mp4")["frames"] == 50


def test_the_only_output_failing_ends_the_render(tmp_path):
    image, audio = write_face_png(tmp_path / "face.png"), write_speechlike_wav(tmp_path / "speech.wav", 2.0)
    dead = f"rtmp://127.0.0.1:{free_port()}/live/key"
    result = run_cli("render", "-i", str(image), "-a", str(audio), "--publish", dead, "-q", *QUICK)
    assert result.returncode == 3, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: every output failed ({dead}: Connection refused); check that the publish targets are reachable")


def test_a_closed_stdout_reader_stops_the_render(tmp_path):
    image, audio = write_face_png(tmp_path / "face.png"), write_speechlike_wav(tmp_path / "speech.wav", 8.0)
    render = avatargen("render", "-i", str(image), "-a", str(audio), "-o", "-", "-q", *QUICK,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    render.stdout.read(188 * 10)  # the reader takes a little, then goes away (like `| head -c`)
    render.stdout.close()
    _, stderr = render.communicate(timeout=240)
    assert render.returncode == 3, stderr
    assert stderr.decode().strip().splitlines()[-1].startswith("error: stdout was closed by the program reading it")


def test_stdout_carries_mpeg_ts_and_nothing_else(tmp_path):
    image, audio = write_face_png(tmp_path / "face.png"), write_speechlike_wav(tmp_path / "speech.wav", 2.0)
    result = run_cli("render", "-i", str(image), "-a", str(audio), "-o", "-", "--json", "-q", *QUICK, text=False)
    assert result.returncode == 0, result.stderr
    stream = result.stdout
    assert len(stream) % 188 == 0 and stream[::188] == b"\x47" * (len(stream) // 188)  # TS packets only
    assert json.loads(result.stderr.decode().splitlines()[-1])["frames"] == 50  # the report went to stderr
    (tmp_path / "piped.ts").write_bytes(stream)
    info = probe(tmp_path / "piped.ts")
    assert (info["video_codec"], info["audio_codec"], info["frames"]) == ("h264", "aac", 50), info
    assert not list(tmp_path.glob("*.mp4"))


def test_audio_from_stdin_wav_and_raw_pcm(tmp_path):
    image = write_face_png(tmp_path / "face.png")
    wav = write_speechlike_wav(tmp_path / "speech.wav", 1.0, rate=22050, channels=2)
    with open(wav, "rb") as stdin:
        result = run_cli("render", "-i", str(image), "-a", "-", "-o", str(tmp_path / "wav.mp4"), "-q", *QUICK, stdin=stdin)
    assert result.returncode == 0, result.stderr
    from_file = run_cli("render", "-i", str(image), "-a", str(wav), "-o", str(tmp_path / "file.mp4"), "-q", *QUICK)
    assert from_file.returncode == 0, from_file.stderr
    # The same audio, streamed or read from the file, makes the same video.
    np.testing.assert_array_equal(decode_frames(tmp_path / "wav.mp4"), decode_frames(tmp_path / "file.mp4"))
    info = probe(tmp_path / "wav.mp4")
    assert info["frames"] == 25 and abs(info["audio_duration_s"] - 1.0) < 0.05, info

    raw = tmp_path / "speech.s16le"
    ffmpeg = imageio_ffmpeg.get_ffmpeg_exe()
    subprocess.run([ffmpeg, "-v", "error", "-i", str(wav), "-f", "s16le", "-ar", "44100", "-ac", "2", str(raw)], check=True)
    with open(raw, "rb") as stdin:
        result = run_cli("render", "-i", str(image), "-a", "-", "--audio-rate", "44100", "--audio-channels", "2",
                         "-o", str(tmp_path / "raw.mp4"), "-q", *QUICK, stdin=stdin)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert probe(tmp_path / "raw.mp4")["frames"] == 25


@pytest.mark.slow  # the WAV parser's errors are unit-tested in tests/io/test_audio_stream.py
def test_stream_input_errors_are_one_line(tmp_path):
    image = write_face_png(tmp_path / "face.png")
    garbage = tmp_path / "noise.bin"
    garbage.write_bytes(bytes(range(256)) * 64)
    with open(garbage, "rb") as stdin:
        result = run_cli("render", "-i", str(image), "-a", "-", "-o", str(tmp_path / "o.mp4"), *QUICK, stdin=stdin)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: audio from stdin: no WAV header on stdin; ")
    assert "--audio-rate" in result.stderr and "Traceback" not in result.stderr
    assert not list(tmp_path.glob("o*.mp4"))  # nothing was rendered: no file, not even a partial one

    wav = write_speechlike_wav(tmp_path / "speech.wav", 1.0)
    for args, message in [
        ((), "nothing to write: give --output OUT.mp4, --output - (MPEG-TS to stdout) or --publish TARGET"),
        (("-o", str(tmp_path / "o.mp4"), "--publish", str(tmp_path / "live.txt")), "is neither an HLS playlist nor an RTMP URL"),
        (("-o", str(tmp_path / "o.mp4"), "--publish", "http://example.com/x"), "uses an unsupported protocol"),
        (("-o", "-", "--resume"), "a stream (stdin/stdout) cannot be resumed"),
    ]:
        result = run_cli("render", "-i", str(image), "-a", str(wav), *args, *QUICK)
        assert result.returncode == 2, result.stderr
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
