"""The live-output harness proven on plain ffmpeg: a browser plays HLS while it is written, RTMP arrives decodable."""

from __future__ import annotations

import subprocess
import time

import imageio_ffmpeg
import pytest

from tests.ffmpeg_probe import probe
from tests.live.harness import HlsBrowser, RtmpIngest, process_group_members

# The harness proven on plain ffmpeg: slow-marked (run with -m slow); tests/live/test_publish.py uses it on renders.
pytestmark = pytest.mark.slow

SECONDS = 6
# A real-time (-re) 6 s test card with a tone, encoded the way a live encoder would: 1 s GOPs, no lookahead.
LIVE_SOURCE = [
    "-re", "-f", "lavfi", "-i", "testsrc2=size=256x256:rate=25", "-f", "lavfi", "-i", "sine", "-t", str(SECONDS),
    "-c:v", "libx264", "-tune", "zerolatency", "-g", "25", "-c:a", "aac",
]  # fmt: skip


def start_ffmpeg(*args: str) -> subprocess.Popen:
    cmd = [imageio_ffmpeg.get_ffmpeg_exe(), "-hide_banner", "-nostdin", "-loglevel", "error", *args]
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)


def test_browser_plays_hls_while_it_is_being_written(tmp_path):
    hls_dir = tmp_path / "hls"
    with HlsBrowser(hls_dir) as browser:
        writer = start_ffmpeg(*LIVE_SOURCE, "-f", "hls", "-hls_time", "1", "-hls_list_size", "0",
                              "-hls_playlist_type", "event", str(hls_dir / "live.m3u8"))  # fmt: skip
        try:
            _, stderr = writer.communicate(timeout=30)
        finally:
            writer.kill()
        written_at = time.monotonic()
        assert writer.returncode == 0, stderr.decode(errors="replace")
        browser.wait_for_current_time(SECONDS - 1.5, timeout_s=10)
        browser_pgid = browser.process_group

        first_progress = browser.first_progress_time()
        assert first_progress is not None and first_progress < written_at - 2.0, browser.summary()
        assert browser.max_current_time() >= SECONDS - 1.5, browser.summary()
        assert browser.errors() == [], browser.summary()
    assert process_group_members(browser_pgid) == []  # no Chromium process outlives the harness


def test_rtmp_ingest_receives_a_decodable_stream(tmp_path):
    received = tmp_path / "received.ts"
    with RtmpIngest(received) as ingest:
        assert ingest.url.startswith("rtmp://127.0.0.1:")
        started_at = time.monotonic()
        publisher = start_ffmpeg(*LIVE_SOURCE, "-f", "flv", ingest.url)
        try:
            _, stderr = publisher.communicate(timeout=30)
        finally:
            publisher.kill()
        assert publisher.returncode == 0, stderr.decode(errors="replace")
    assert ingest.returncode == 0, ingest.stderr_tail()
    # The first bytes come out ~0.3 s (ffmpeg's start-up) after the publisher starts, not after seconds of probing.
    assert ingest.first_bytes_time is not None and ingest.first_bytes_time - started_at < 1.5

    info = probe(received)
    assert (info["video_codec"], info["audio_codec"], info["width"], info["height"]) == ("h264", "aac", 256, 256)
    assert info["frames"] == SECONDS * 25, info
    assert abs(info["audio_duration_s"] - SECONDS) < 0.1, info


def test_rtmp_ingest_keeps_what_arrived_when_the_publisher_is_killed(tmp_path):
    received = tmp_path / "received.ts"
    with RtmpIngest(received) as ingest:
        publisher = start_ffmpeg(*LIVE_SOURCE, "-f", "flv", ingest.url)
        time.sleep(3)
        publisher.kill()
        publisher.wait()
    info = probe(received)
    assert 1.5 < info["video_duration_s"] < 3.5, info
