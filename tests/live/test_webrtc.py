"""The WebRTC output (``--publish webrtc://``) played by a real browser: headless Chromium opens the viewer page,
plays the stream, and the test reads what it decodes (tests/live/webrtc_viewer.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

from tests.conftest import FAST, REPO, run_cli, write_face_png, write_speechlike_wav
from tests.ffmpeg_probe import probe
from tests.live.harness import free_port
from tests.live.speech_feed import LiveMicrophone, mouth_box
from tests.live.webrtc_viewer import WebRtcBrowser

AVATAR = REPO / "examples" / "avatar_1.png"


def avatargen(*args: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "avatargen", *args], env=env, **{"text": True, **kwargs})


def wait_for_page(url: str, render: subprocess.Popen, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert render.poll() is None, render.stderr.read()[-2000:]
        try:
            with urllib.request.urlopen(url, timeout=2) as page:
                assert b"whep" in page.read()
                return
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.2)
    raise AssertionError(f"the viewer page at {url} did not come up")


def post_offer(url: str, body: bytes, content_type: str = "application/sdp") -> tuple[int, str]:
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def wait_for_frames(pages, count: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while any(len(page.times) < count for page in pages) and time.monotonic() < deadline:
        for page in pages:
            page.take()
        time.sleep(0.2)


def collect(pages, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for page in pages:
            page.take()
        time.sleep(0.2)


def mouth_motion(page, start: float, end: float, least: int) -> float:
    """How much the mouth region changes from one presented frame to the next, at most (95th percentile), over the
    frames presented from ``start`` to ``end`` (wall clock; at least ``least`` of them). The idle motion's slow sway
    changes it a little every frame; speech opens and shuts the mouth."""
    times, crops = np.asarray(page.times), np.stack(page.crops).astype(np.float32)
    motion = np.concatenate([[0.0], np.abs(np.diff(crops, axis=0)).mean(axis=(1, 2))])
    window = (times >= start) & (times < end)
    assert window.sum() >= least, f"only {window.sum()} frames presented in that window"
    return float(np.percentile(motion[window], 95))


def audio_level(page, start: float, end: float) -> float:
    levels, at = np.asarray(page.levels), np.asarray(page.level_times)
    return float(np.percentile(levels[(at >= start) & (at < end)], 90))


@pytest.mark.slow
def test_two_browsers_play_a_live_session_the_mouth_moves_with_speech_on_stdin_and_one_leaving_stops_nothing(tmp_path):
    port, out = free_port(), tmp_path / "session.mp4"
    url = f"http://127.0.0.1:{port}/"
    box = mouth_box(AVATAR)
    with WebRtcBrowser() as browser, WebRtcBrowser() as other_browser:  # two viewers: two browsers
        render = avatargen("render", "-i", str(AVATAR), "-a", "-", "-o", str(out), "--realtime", "--publish",
                           f"webrtc://127.0.0.1:{port}", "--json", stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=False)  # fmt: skip
        microphone = LiveMicrophone(render.stdin)
        try:
            wait_for_page(url, render)
            first, second = browser.open(url, box), other_browser.open(url, box)
            # Both play (in pauses a render behind the clock drops silent frames to catch up: few frames then).
            wait_for_frames([first, second], 5, timeout_s=60)
            assert len(first.times) >= 5 and len(second.times) >= 5, (first.status(), second.status())

            # A viewer's bad offer is refused with a 4xx; the render and the viewers go on.
            assert post_offer(url + "whep", b"v=0 this is not SDP")[0] == 400
            assert post_offer(url + "whep", b"v=0", content_type="text/plain")[0] == 415

            collect([first, second], 1.0)
            microphone.speak()
            collect([first, second], 2.5)
            second.close()  # one viewer leaves mid-session
            left_at = time.time()
            collect([first], 0.5)
            microphone.speak()
            collect([first], 2.5)
        finally:
            microphone.close()
        render.stdin = None  # the microphone closed it: the session ends
        stdout, stderr = render.communicate(timeout=60)
    assert render.returncode == 0, stderr[-2000:].decode()
    spoken = microphone.spoken
    # Within 0.8 s of a burst's first sample the mouth moves, far more than it did before any speech, for both
    # viewers; after one left, for the other.
    for page, bursts in ((first, spoken), (second, spoken[:1])):
        rest = mouth_motion(page, 0, spoken[0], least=3)
        for at in bursts:
            moved = mouth_motion(page, at, at + 1.5 + 0.8, least=15)
            assert moved > 3 * max(rest, 1.0), (moved, rest, page.status())
    # the voice plays with it: louder during speech than before by far
    assert audio_level(first, spoken[0], spoken[0] + 1.5 + 0.8) > 20 * audio_level(first, 0, spoken[0])
    assert np.asarray(second.times).max() < left_at + 0.5
    # the file has every frame the render showed, whoever watched and left (a render behind the clock leaves silent
    # frames out to catch up: the report counts them apart)
    report = json.loads(stdout)
    assert probe(out)["frames"] == report["frames"] - report["realtime"]["dropped"] >= 2 * 1.5 * 25


def test_a_browser_plays_a_render_published_only_over_webrtc_with_its_audio_and_a_bad_offer_gets_400(tmp_path):
    # 8 s of speech: a viewer sees the frames sent after its browser has connected, which can take seconds on a loaded
    # machine, and it must see 40
    image, audio = write_face_png(tmp_path / "face.png"), write_speechlike_wav(tmp_path / "speech.wav", 8.0)
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    with WebRtcBrowser() as browser:
        render = avatargen("render", "-i", str(image), "-a", str(audio), "--realtime", "--publish", f"webrtc://127.0.0.1:{port}", *FAST, "output.realtime_buffer_s=2",
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
        wait_for_page(url, render)
        viewer = browser.open(url, (0, 16, 0, 16))
        assert post_offer(url + "whep", b"\x00\xff garbage")[0] == 400
        wait_for_frames([viewer], 40, timeout_s=30)
        stats, status = viewer.audio(), viewer.status()  # read while the browser is open
        _, stderr = render.communicate(timeout=60)
    assert render.returncode == 0, stderr[-2000:]
    assert len(viewer.times) >= 40, status
    assert stats is not None and stats["packets"] > 25  # the audio track plays too (50 packets a second)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["face.png", "speech.wav"]  # no file: WebRTC alone


def test_the_json_report_lists_a_webrtc_target_among_the_publish_targets_in_their_order(tmp_path, face_png):
    # It listed the encoder's targets only: a render published over WebRTC reported "publish": [].
    audio, port = write_speechlike_wav(tmp_path / "speech.wav", 1.0), free_port()
    hls = tmp_path / "hls" / "live.m3u8"
    result = run_cli("render", "-i", str(face_png), "-a", str(audio), "-o", str(tmp_path / "out.mp4"), "--realtime",
                     "--publish", f"webrtc://127.0.0.1:{port}", "--publish", str(hls), "--json", "-q", *FAST,
                     "pipeline.sampling_steps=1")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["publish"] == [
        {"target": f"webrtc://127.0.0.1:{port}", "kind": "webrtc", "dropped": False, "reason": None},
        {"target": str(hls), "kind": "hls", "dropped": False, "reason": None}]  # fmt: skip


def _listening_socket() -> socket.socket:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    return server


@pytest.mark.parametrize("case", ["port in use", "not an address here", "beyond loopback without a token",
                                  "not paced", "extra missing", "no port"])  # fmt: skip
def test_a_webrtc_target_that_cannot_be_served_is_one_line_and_exit_2(tmp_path, face_png, speech_wav, case):
    with _listening_socket() as taken:
        target = {"port in use": f"webrtc://127.0.0.1:{taken.getsockname()[1]}",
                  "not an address here": "webrtc://203.0.113.7:8080",
                  "beyond loopback without a token": "webrtc://0.0.0.0:8080",
                  "no port": "webrtc://127.0.0.1"}.get(case, f"webrtc://127.0.0.1:{free_port()}")  # fmt: skip
        args = ["render", "-i", str(face_png), "-a", str(speech_wav), "--publish", target, *FAST, "-o", str(tmp_path / "o.mp4")]
        args += [] if case == "not paced" else ["--realtime"]
        env = {"AVATARGEN_WEBRTC_TOKEN": "secret"} if case == "not an address here" else None
        if case == "extra missing":  # an environment where aiortc cannot be imported
            shadow = tmp_path / "shadow"
            shadow.mkdir()
            (shadow / "aiortc.py").write_text("raise ImportError(\"No module named 'aiortc'\")\n")
            env = {"PYTHONPATH": f"{shadow}:{REPO}"}
        result = run_cli(*args, env_extra=env)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    expected = {"port in use": "in use", "not an address here": "not an address of this machine",
                "beyond loopback without a token": "AVATARGEN_WEBRTC_TOKEN", "not paced": "--realtime",
                "extra missing": "pip install 'avatargen[webrtc]'",
                "no port": "webrtc://127.0.0.1:PORT"}[case]  # fmt: skip
    assert expected in lines[0], lines
    assert not (tmp_path / "o.mp4").exists() and not (tmp_path / "o.partial.mp4").exists()
