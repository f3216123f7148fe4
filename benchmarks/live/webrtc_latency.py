"""WebRTC latency as a browser shows it, and what serving viewers costs: ``avatargen render -a - --realtime
--publish webrtc://...`` is started with speech on stdin as benchmarks/live/live_latency.py feeds it (room noise at
-60 dBFS, a 1.5-s burst every ``--period`` s), and headless Chromium opens the viewer page, once per viewer. In the
page, every frame the <video> presents is noted with its time and its mouth region (tests/live/webrtc_viewer.py); a
burst's latency is the first frame presented from its first sample written on whose mouth moved
(``mouth_motion``), minus the time the sample was written: measured in the page, not on the server.

CPU: the render process's CPU seconds per second over the bursts (the WebRTC server runs in it), with 0 viewers
(--viewers 0: the sink encodes all the same) and N, and the render's underruns: it must stay real time. Browsers
on the same 2 cores take the CPU the render needs, so ``--light-viewers N`` adds N viewers that are aiortc peers in
this process (they receive and decode, as a browser on another machine would, for a fraction of its CPU).

    python benchmarks/live/webrtc_latency.py --seconds 40                     # one browser
    python benchmarks/live/webrtc_latency.py --seconds 40 --light-viewers 3   # and three more viewers
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.live.harness import free_port  # noqa: E402
from tests.live.speech_feed import LiveMicrophone, mouth_box, mouth_motion  # noqa: E402
from tests.live.webrtc_viewer import WebRtcBrowser  # noqa: E402

AVATAR = REPO / "examples" / "avatar_1.png"


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (its own threads, not its children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class LightViewers:
    """``count`` WHEP viewers that are aiortc peers on a thread of their own, each decoding what it receives."""

    def __init__(self, url: str, count: int) -> None:
        import aioice.ice

        aioice.ice.get_host_addresses = lambda use_ipv4, use_ipv6: ["127.0.0.1"]  # loopback only, as the server
        self.url, self.count, self.frames = url, count, [0] * count
        self._loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._run(),), daemon=True)
        self._thread.start()

    async def _run(self) -> None:
        self._stop = asyncio.Event()
        await asyncio.gather(*(self._viewer(k) for k in range(self.count)))

    async def _viewer(self, k: int) -> None:
        import aiohttp
        from aiortc import RTCPeerConnection, RTCSessionDescription

        pc = RTCPeerConnection()
        pc.addTransceiver("video", direction="recvonly")
        pc.addTransceiver("audio", direction="recvonly")
        drains = []

        async def drain(track) -> None:
            while True:
                await track.recv()
                if track.kind == "video":
                    self.frames[k] += 1

        pc.on("track", lambda track: drains.append(asyncio.ensure_future(drain(track))))
        await pc.setLocalDescription(await pc.createOffer())
        async with aiohttp.ClientSession() as session:
            async with session.post(self.url + "whep", data=pc.localDescription.sdp,
                                    headers={"Content-Type": "application/sdp"}) as response:  # fmt: skip
                answer = await response.text()
        await pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
        await self._stop.wait()
        for task in drains:
            task.cancel()
        await pc.close()

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=40.0, help="seconds of bursts once the viewers play")
    parser.add_argument("--period", type=float, default=4.0, help="seconds between burst starts")
    parser.add_argument("--viewers", type=int, default=1, help="browsers (headless Chromium) that watch")
    parser.add_argument("--light-viewers", type=int, default=0, help="more viewers: aiortc peers in this process")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()

    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    box = mouth_box(AVATAR)
    load_start = os.getloadavg()[0]
    render = subprocess.Popen([sys.executable, "-m", "avatargen", "render", "-i", str(AVATAR), "-a", "-", "--realtime",
                               "--publish", f"webrtc://127.0.0.1:{port}", "--json", "-q", *args.overrides],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    microphone = LiveMicrophone(render.stdin)
    browsers = [WebRtcBrowser().__enter__() for _ in range(args.viewers)]
    light, pages = None, []
    try:
        while True:
            try:
                urllib.request.urlopen(url, timeout=1).read()
                break
            except OSError:
                if render.poll() is not None:
                    sys.exit(render.stderr.read().decode())
                time.sleep(0.2)
        pages = [b.open(url, box) for b in browsers[: args.viewers]]
        light = LightViewers(url, args.light_viewers) if args.light_viewers else None
        deadline = time.monotonic() + 60
        while pages and any(p.take() + len(p.times) < 5 for p in pages) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(2.0)
        cpu0, wall0 = cpu_seconds(render.pid), time.monotonic()
        end = time.monotonic() + args.seconds
        next_burst = time.monotonic() + 1.0
        while time.monotonic() < end:
            if time.monotonic() >= next_burst:
                microphone.speak()
                next_burst += args.period
            for page in pages:
                page.take()
            time.sleep(0.1)
        cpu = (cpu_seconds(render.pid) - cpu0) / (time.monotonic() - wall0)
        if light is not None:
            light.close()
    finally:
        microphone.close()
        render.stdin = None
        stdout, stderr = render.communicate(timeout=120)
        for browser in browsers:
            browser.__exit__(None, None, None)
    if render.returncode != 0:
        sys.exit(stderr.decode()[-2000:])
    report = json.loads(stdout)
    result: dict = {"viewers": args.viewers, "light_viewers": args.light_viewers,
                    "light_viewer_frames": light.frames if light is not None else [],
                    "render_cpu_per_s": round(cpu, 3), "realtime": report["realtime"],
                    "load_avg": [round(load_start, 2), round(os.getloadavg()[0], 2)]}  # fmt: skip
    if pages:
        page = pages[0]
        times, moving = np.asarray(page.times), mouth_motion(np.stack(page.crops))
        latencies = []
        for at in microphone.spoken:
            seen = np.flatnonzero((times >= at) & (times <= at + 1.5) & moving)
            latencies.append(float(times[seen[0]] - at) if len(seen) else None)
        found = [v for v in latencies if v is not None]
        result["latency_s"] = {"median": round(float(np.median(found)), 3), "max": round(float(np.max(found)), 3),
                               "bursts": len(latencies), "mouth_not_seen": latencies.count(None)} if found else None  # fmt: skip
        result["per_burst_s"] = [None if v is None else round(v, 2) for v in latencies]
        result["frames_presented_per_viewer"] = [len(p.times) for p in pages]
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
