"""A real WebRTC viewer: headless Chromium opens avatargen's viewer page (``webrtc://`` output), and what it decodes
is read through the DevTools protocol: each frame the <video> presents (``requestVideoFrameCallback``), its time and
its mouth region drawn through a canvas, and the audio track's receive statistics.

Shares no code with avatargen. Times are ``time.time()`` seconds (the page's ``performance.timeOrigin + now``: one
wall clock for the browser and the test)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import aiohttp
import numpy as np

from tests.live.harness import HLS_JS_INSTALL, _stop_group, _tail

# Installed on the page once it loaded: keeps, per presented frame, (wall time ms, mediaTime, the mouth box's gray
# pixels) until the test takes them.
_PROBE = """
(() => {
  if (window.__probe) return "already";
  const [y0, y1, x0, x1] = %s;
  const video = document.getElementById("video");
  const canvas = document.createElement("canvas");
  const ctx = canvas.getContext("2d", {willReadFrequently: true});
  window.__probe = {frames: [], levels: []};
  // The audio as it plays: its RMS every 20 ms (WebAudio reads the same stream the <video> plays).
  const startAudio = () => {
    if (!video.srcObject || !video.srcObject.getAudioTracks().length) return setTimeout(startAudio, 100);
    const audio = new AudioContext();
    const analyser = audio.createAnalyser();
    analyser.fftSize = 1024;
    audio.createMediaStreamSource(video.srcObject).connect(analyser);
    const samples = new Float32Array(analyser.fftSize);
    setInterval(() => {
      analyser.getFloatTimeDomainData(samples);
      let sum = 0;
      for (const x of samples) sum += x * x;
      window.__probe.levels.push([performance.timeOrigin + performance.now(), Math.sqrt(sum / samples.length)]);
    }, 20);
  };
  startAudio();
  function onFrame(now, meta) {
    if (video.videoWidth) {
      canvas.width = video.videoWidth; canvas.height = video.videoHeight;
      ctx.drawImage(video, 0, 0);
      const rgba = ctx.getImageData(x0, y0, x1 - x0, y1 - y0).data;
      const gray = new Array(rgba.length / 4);
      for (let i = 0; i < gray.length; i++) gray[i] = (rgba[4 * i] + rgba[4 * i + 1] + rgba[4 * i + 2]) / 3 | 0;
      window.__probe.frames.push([performance.timeOrigin + now, meta.mediaTime, gray]);
    }
    video.requestVideoFrameCallback(onFrame);
  }
  video.requestVideoFrameCallback(onFrame);
  return "installed";
})()
"""
_AUDIO_STATS = """
(async () => {
  const pc = window.avatargenPeer;
  if (!pc) return null;
  const stats = await pc.getStats();
  for (const s of stats.values()) {
    if (s.type === "inbound-rtp" && s.kind === "audio")
      return {packets: s.packetsReceived, samples: s.totalSamplesReceived || 0, energy: s.totalAudioEnergy || 0};
  }
  return null;
})()
"""


class Page:
    """One tab playing the viewer page; ``frames()`` takes what it presented since the last call."""

    def __init__(self, browser: "WebRtcBrowser", target_id: str, ws_url: str, box: tuple[int, int, int, int]) -> None:
        self.browser, self.target_id, self.ws_url, self.box = browser, target_id, ws_url, box
        self.times: list[float] = []
        self.crops: list[np.ndarray] = []
        self.level_times: list[float] = []
        self.levels: list[float] = []

    def evaluate(self, expression: str):
        return self.browser.evaluate(self.ws_url, expression)

    def install_probe(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if self.evaluate("document.readyState") == "complete" and self.evaluate(_PROBE % list(self.box)):
                    return
            except (RuntimeError, aiohttp.ClientError):
                pass
            time.sleep(0.2)
        raise RuntimeError("the viewer page did not load")

    def take(self) -> int:
        """Collect the frames presented since the last call; how many."""
        taken = self.evaluate("window.__probe ? [window.__probe.frames.splice(0), window.__probe.levels.splice(0)] : "
                              "[[], []]")  # fmt: skip
        frames, levels = taken or ([], [])
        for at_ms, level in levels:
            self.level_times.append(at_ms / 1000)
            self.levels.append(level)
        h, w = self.box[1] - self.box[0], self.box[3] - self.box[2]
        for at_ms, _, gray in frames:
            self.times.append(at_ms / 1000)
            self.crops.append(np.asarray(gray, np.uint8).reshape(h, w))
        return len(frames)

    def audio(self) -> dict | None:
        """The audio track's inbound statistics: packets, samples and energy received so far."""
        return self.evaluate(_AUDIO_STATS)

    def status(self) -> str:
        """The page's status line, the video's state and what the probe holds: for assertion messages."""
        return self.evaluate("`${document.getElementById('status').textContent} ready=${video.readyState} "
                             "size=${video.videoWidth}x${video.videoHeight} t=${video.currentTime} "
                             "probe=${window.__probe ? window.__probe.frames.length : 'none'}`")  # fmt: skip

    def close(self) -> None:
        self.browser.close_page(self)


class WebRtcBrowser:
    """Headless Chromium with the DevTools protocol on a loopback port; ``open(url, box)`` opens a page."""

    def __init__(self) -> None:
        self._profile = tempfile.TemporaryDirectory(prefix="avatargen-webrtc-")
        self._proc: subprocess.Popen | None = None
        self.port = 0
        self.log = Path(self._profile.name) / "chromium.log"

    def __enter__(self) -> WebRtcBrowser:
        chromium = shutil.which("chromium")
        if chromium is None:
            raise RuntimeError(f"chromium is not installed; install it: {HLS_JS_INSTALL}")
        profile = Path(self._profile.name) / "profile"
        flags = ["--headless=new", "--no-sandbox", "--autoplay-policy=no-user-gesture-required", "--disable-gpu",
                 f"--user-data-dir={profile}", "--no-first-run", "--remote-debugging-port=0",
                 "--remote-debugging-address=127.0.0.1", "--disable-background-timer-throttling",
                 "--disable-renderer-backgrounding", "--disable-backgrounding-occluded-windows",
                 # loopback candidates, and plain addresses instead of mDNS names: the media stays on 127.0.0.1
                 "--allow-loopback-in-peer-connection", "--disable-features=WebRtcHideLocalIpsWithMdns",
                 "about:blank"]  # fmt: skip
        with open(self.log, "wb") as log:
            self._proc = subprocess.Popen([chromium, *flags], stdin=subprocess.DEVNULL, stdout=log,
                                          stderr=subprocess.STDOUT, process_group=0)  # fmt: skip
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not port_file.is_file() or not port_file.read_text().strip():
            if time.monotonic() > deadline or self._proc.poll() is not None:
                self.__exit__(None, None, None)
                raise RuntimeError(f"chromium did not start:\n{_tail(self.log)}")
            time.sleep(0.1)
        self.port = int(port_file.read_text().split()[0])
        return self

    def __exit__(self, *exc) -> None:
        if self._proc is not None:
            _stop_group(self._proc, 5.0)
        self._profile.cleanup()

    def open(self, url: str, box: tuple[int, int, int, int]) -> Page:
        """A page in a window of its own (a background tab would present no frames)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/version", timeout=10) as response:
            browser_ws = json.loads(response.read())["webSocketDebuggerUrl"]
        target_id = asyncio.run(_call(browser_ws, "Target.createTarget", {"url": url, "newWindow": True}))["targetId"]
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/list", timeout=10) as response:
            ws_url = next(t["webSocketDebuggerUrl"] for t in json.loads(response.read()) if t["id"] == target_id)
        page = Page(self, target_id, ws_url, box)
        page.install_probe()
        return page

    def close_page(self, page: Page) -> None:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/close/{page.target_id}", timeout=10):
            pass

    def evaluate(self, ws_url: str, expression: str):
        return asyncio.run(_evaluate(ws_url, expression))


async def _evaluate(ws_url: str, expression: str):
    result = await _call(ws_url, "Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                       "awaitPromise": True})  # fmt: skip
    if "exceptionDetails" in result:
        raise RuntimeError(str(result["exceptionDetails"])[:500])
    return result.get("result", {}).get("value")


async def _call(ws_url: str, method: str, params: dict, tries: int = 3) -> dict:
    """One DevTools protocol call on ``ws_url``; its result (a refused connection is tried again: a busy browser
    may not listen yet)."""
    for _ in range(tries - 1):
        try:
            return await _call_once(ws_url, method, params)
        except aiohttp.ClientConnectorError:
            await asyncio.sleep(0.5)
    return await _call_once(ws_url, method, params)


async def _call_once(ws_url: str, method: str, params: dict) -> dict:
    async with aiohttp.ClientSession() as session, session.ws_connect(ws_url, max_msg_size=0) as ws:
        await ws.send_json({"id": 1, "method": method, "params": params})
        async for message in ws:
            reply = json.loads(message.data)
            if reply.get("id") == 1:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
    raise RuntimeError("DevTools closed the connection")
