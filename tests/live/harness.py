"""Real receivers for live output: a local RTMP ingest and a headless Chromium that plays an HLS playlist.

Both run the same tools a viewer would (ffmpeg, Chromium with hls.js) and share no code with avatargen. Times are
``time.monotonic()`` seconds: CLOCK_MONOTONIC is one clock for every process on the machine, so they compare with
times taken around a render subprocess.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import imageio_ffmpeg

LIVE_DIR = Path(__file__).resolve().parent
PLAYER_PAGE = LIVE_DIR / "player.html"
# Installed by tests/install.sh (the version is pinned there).
HLS_JS = LIVE_DIR / "node_modules" / "hls.js" / "dist" / "hls.min.js"
HLS_JS_INSTALL = "bash tests/install.sh"

_FFMPEG = imageio_ffmpeg.get_ffmpeg_exe()
_TCP_LISTEN = "0A"  # socket state in /proc/net/tcp


def free_port() -> int:
    """A loopback TCP port that was free a moment ago (the caller retries if another process takes it first)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def is_listening(port: int) -> bool:
    """Whether some socket listens on 127.0.0.1:``port``, read from /proc/net/tcp.

    Connecting to find out would not do for ``ffmpeg -listen 1``: it accepts exactly one connection, the probe's.
    """
    local = f"0100007F:{port:04X}"
    with open("/proc/net/tcp") as table:
        return any(f[1] == local and f[3] == _TCP_LISTEN for f in (line.split() for line in table) if len(f) > 3)


def _stop_group(proc: subprocess.Popen, grace_s: float, first_signal: int = signal.SIGTERM) -> None:
    """Send ``first_signal`` to ``proc``'s process group, SIGKILL whatever is left after ``grace_s``, reap ``proc``."""
    for sig, wait_s in ((first_signal, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait_s
        while (proc.poll() is None or process_group_members(proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        if proc.poll() is not None and not process_group_members(proc.pid):
            break
    proc.wait()


def process_group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes whose process group is ``pgid``."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class RtmpIngest:
    """A one-stream RTMP server on loopback (``ffmpeg -listen 1``) that copies what is published into ``output``.

    ``output`` is MPEG-TS (stream copy, no re-encode): it needs no trailer, so it decodes even when the publisher
    dies mid-stream. On leaving the ``with`` block the ingest waits up to ``end_timeout_s`` for the publisher to end
    the stream (at once when the block raised), then stops ffmpeg.
    """

    def __init__(self, output: Path, *, key: str = "stream", end_timeout_s: float = 10.0) -> None:
        self.output = Path(output)
        self.key = key
        self.end_timeout_s = end_timeout_s
        self.log = self.output.with_name(self.output.name + ".ingest.log")  # ffmpeg's stderr
        self.url = ""
        self.first_bytes_time: float | None = None  # when the first muxed bytes of the stream came out of ffmpeg
        self.bytes_received = 0
        self._proc: subprocess.Popen | None = None
        self._copier: threading.Thread | None = None

    def __enter__(self) -> RtmpIngest:
        for _ in range(3):  # another process may take the free port before ffmpeg binds it
            port = free_port()
            if self._start(port):
                self.url = f"rtmp://127.0.0.1:{port}/live/{self.key}"
                return self
        raise RuntimeError(f"RTMP ingest could not listen:\n{_tail(self.log)}")

    def _start(self, port: int, timeout_s: float = 10.0) -> bool:
        # -analyzeduration 0.1 s: ffmpeg's default 5 s of probing would hold the first bytes back ~1.4 s and skew
        # latency measurements; FLV carries codec parameters in its headers, so little probing is needed.
        # (-fflags nobuffer -probesize 32 went further and lost most of the stream.)
        cmd = [_FFMPEG, "-hide_banner", "-nostdin", "-loglevel", "warning", "-analyzeduration", "100000",
               "-listen", "1", "-i", f"rtmp://127.0.0.1:{port}/live/{self.key}",
               "-map", "0", "-c", "copy", "-f", "mpegts", "-flush_packets", "1", "pipe:1"]  # fmt: skip
        with open(self.log, "wb") as log:
            self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                                          process_group=0)  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while not is_listening(port):
            if self._proc.poll() is not None:
                self._proc.stdout.close()
                return False
            if time.monotonic() > deadline:
                _stop_group(self._proc, 2.0)
                raise RuntimeError(f"RTMP ingest not listening after {timeout_s:.0f} s:\n{_tail(self.log)}")
            time.sleep(0.01)
        self._copier = threading.Thread(target=self._copy, name="rtmp-ingest-copy", daemon=True)
        self._copier.start()
        return True

    def _copy(self) -> None:
        # Copying through Python rather than letting ffmpeg write the file times the first bytes exactly.
        with self._proc.stdout as stream, open(self.output, "wb") as out:
            while chunk := stream.read1(1 << 16):
                if self.first_bytes_time is None:
                    self.first_bytes_time = time.monotonic()
                out.write(chunk)
                out.flush()
                self.bytes_received += len(chunk)

    def wait(self, timeout_s: float) -> bool:
        """Wait until the publisher ended the stream and ffmpeg exited; False on timeout."""
        try:
            self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return False
        self._copier.join()
        return True

    @property
    def returncode(self) -> int | None:
        return self._proc.poll() if self._proc else None

    def stderr_tail(self) -> str:
        """ffmpeg's last warnings and errors, for assertion messages."""
        return _tail(self.log)

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None or not self.wait(self.end_timeout_s):
            _stop_group(self._proc, 5.0, signal.SIGINT)  # SIGINT: ffmpeg flushes what it has and exits 0
        self._copier.join(5.0)


@dataclass(frozen=True)
class PlaybackReport:
    """One message from the test page: a <video> event or a 200 ms tick."""

    received_at: float  # time.monotonic() when the harness's server got it
    event: str  # tick, page-loaded, playlist-found, playing, waiting, ended, error, hls-fatal, page-error, ...
    detail: str
    current_time: float  # video.currentTime, seconds of media
    ready_state: int  # HTMLMediaElement.readyState: 0 nothing, 1 metadata, 2+ can render
    paused: bool
    buffered_end: float  # end of the last buffered range, seconds of media
    video_error: str | None  # "CODE: message" of video.error


_ERROR_EVENTS = {"error", "hls-fatal", "page-error", "play-error", "harness-error"}


class HlsBrowser:
    """Headless Chromium playing ``root/playlist`` with hls.js from a local HTTP server, reporting as it plays.

    The page waits for the playlist to list a segment, so the browser may start before the render does. Reports
    arrive every 200 ms; ``first_progress_time`` tells when playback first advanced. On exit Chromium's whole process
    group is killed and the server stops.
    """

    def __init__(self, root: Path, playlist: str = "live.m3u8", *, start_timeout_s: float = 30.0) -> None:
        self.root = Path(root)
        self.playlist = playlist
        self.start_timeout_s = start_timeout_s
        self.reports: list[PlaybackReport] = []
        self._lock = threading.RLock()  # RLock: wait_for's condition reads the reports while holding it
        self._changed = threading.Condition(self._lock)
        self._server: http.server.ThreadingHTTPServer | None = None
        self._browser: subprocess.Popen | None = None
        self._profile: tempfile.TemporaryDirectory | None = None
        self.log: Path | None = None  # Chromium's output; inside the temporary profile, gone after exit

    # --- lifecycle

    def __enter__(self) -> HlsBrowser:
        chromium = shutil.which("chromium")
        if chromium is None:
            raise RuntimeError(f"chromium is not installed; install it (and hls.js): {HLS_JS_INSTALL}")
        if not HLS_JS.is_file():
            raise RuntimeError(f"hls.js is missing at {HLS_JS}; install it from the repository root: {HLS_JS_INSTALL}")
        self.root.mkdir(parents=True, exist_ok=True)
        handler = functools.partial(_Handler, self, directory=str(self.root))
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self._server.serve_forever, name="hls-http", daemon=True).start()
        self._profile = tempfile.TemporaryDirectory(prefix="avatargen-chromium-")
        port = self._server.server_address[1]
        url = f"http://127.0.0.1:{port}/__harness__/player.html?src=/{self.playlist}"
        try:
            self._launch(chromium, url)
            self._wait_for_page()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _launch(self, chromium: str, url: str) -> None:
        profile = Path(self._profile.name)
        flags = [
            "--headless=new", "--no-sandbox", "--autoplay-policy=no-user-gesture-required", "--mute-audio",
            f"--user-data-dir={profile / 'profile'}", "--no-first-run", "--disable-gpu",
            # Keep the page's 200 ms reports on time while the render loads the CPU.
            "--disable-background-timer-throttling", "--disable-renderer-backgrounding",
            "--disable-backgrounding-occluded-windows",
        ]  # fmt: skip
        self.log = profile / "chromium.log"
        with open(self.log, "wb") as log:
            self._browser = subprocess.Popen([chromium, *flags, url], stdin=subprocess.DEVNULL, stdout=log,
                                             stderr=subprocess.STDOUT, process_group=0)  # fmt: skip

    def _wait_for_page(self) -> None:
        ok = self.wait_for(lambda: self._events_seen({"page-loaded", "harness-error"}), self.start_timeout_s)
        if self._events_seen({"harness-error"}):
            raise RuntimeError(f"test page failed: {self.errors()}")
        if not ok:
            state = "exited" if self._browser.poll() is not None else "running"
            raise RuntimeError(f"test page did not load in {self.start_timeout_s:.0f} s (chromium {state}):\n"
                               f"{_tail(self.log)}")  # fmt: skip

    @property
    def process_group(self) -> int:
        """Chromium's process group id: every Chromium process is in it, and none is left after exit."""
        return self._browser.pid

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._browser is not None:
            _stop_group(self._browser, 5.0)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._profile is not None:
            self._profile.cleanup()

    # --- what the page reported

    def _receive(self, fields: dict) -> None:
        report = PlaybackReport(
            received_at=time.monotonic(),
            event=str(fields.get("event", "")),
            detail=str(fields.get("detail", "")),
            current_time=float(fields.get("current_time") or 0.0),
            ready_state=int(fields.get("ready_state") or 0),
            paused=bool(fields.get("paused")),
            buffered_end=float(fields.get("buffered_end") or 0.0),
            video_error=fields.get("video_error"),
        )
        with self._changed:
            self.reports.append(report)
            self._changed.notify_all()

    def _snapshot(self) -> list[PlaybackReport]:
        with self._lock:
            return list(self.reports)

    def _events_seen(self, events: set[str]) -> bool:
        return any(r.event in events for r in self._snapshot())

    def wait_for(self, condition: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until ``condition()`` holds (re-checked on each report); False on timeout or if Chromium exited."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not condition():
                left = deadline - time.monotonic()
                if left <= 0 or (self._browser is not None and self._browser.poll() is not None):
                    return False
                self._changed.wait(min(left, 0.5))
            return True

    def wait_for_current_time(self, seconds: float, timeout_s: float) -> bool:
        """Wait until the video has played to ``seconds`` of media time."""
        return self.wait_for(lambda: self.max_current_time() >= seconds, timeout_s)

    def first_progress_time(self) -> float | None:
        """When playback first advanced: the first report whose currentTime is past where the video started.

        The start is the currentTime of the first report with metadata loaded (hls.js may join a live playlist
        past 0). None while the video has not advanced.
        """
        start = None
        for report in self._snapshot():
            if report.ready_state < 1:
                continue
            if start is None:
                start = report.current_time
            elif report.current_time > start:
                return report.received_at
        return None

    def max_current_time(self) -> float:
        """The furthest media time the video has played to, in seconds."""
        return max((r.current_time for r in self._snapshot()), default=0.0)

    def errors(self) -> list[str]:
        """Fatal playback and page errors, as "event: detail" (hls.js warnings it recovers from are left out)."""
        found = []
        for report in self._snapshot():
            if report.event in _ERROR_EVENTS:
                found.append(f"{report.event}: {report.detail or report.video_error}")
        return found

    def summary(self) -> str:
        """Every non-tick report, one a line, and the last tick: for assertion messages."""
        reports = self._snapshot()
        shown = [r for r in reports if r.event != "tick"] + [r for r in reports if r.event == "tick"][-1:]
        start = reports[0].received_at if reports else 0.0
        return "\n".join(
            f"+{r.received_at - start:6.2f}s {r.event:<15} t={r.current_time:.2f} ready={r.ready_state} "
            f"buffered={r.buffered_end:.2f} {r.detail or r.video_error or ''}"
            for r in shown
        )


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves the playlist folder uncached with HLS MIME types, the harness's page and hls.js, and takes reports."""

    extensions_map = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".m3u8": "application/vnd.apple.mpegurl",
        ".ts": "video/mp2t",
        ".m4s": "video/iso.segment",
        ".js": "text/javascript",
    }

    def __init__(self, browser: HlsBrowser, *args, **kwargs) -> None:
        self.browser = browser
        super().__init__(*args, **kwargs)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/__harness__/player.html":
            self._send_file(PLAYER_PAGE, "text/html; charset=utf-8")
        elif path == "/__harness__/hls.min.js":
            self._send_file(HLS_JS, "text/javascript")
        else:
            super().do_GET()

    def do_POST(self) -> None:
        if self.path != "/__harness__/report":
            self.send_error(404)
            return
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        try:
            self.browser._receive(json.loads(body))
        except (ValueError, TypeError) as error:
            self.browser._receive({"event": "harness-error", "detail": f"bad report {body[:200]!r}: {error}"})
        self.send_response(204)
        self.end_headers()

    def _send_file(self, path: Path, content_type: str) -> None:
        data = path.read_bytes()
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def end_headers(self) -> None:
        # A live playlist changes under the same URL: the browser must never reuse an old copy.
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_message(self, format: str, *args) -> None:
        pass  # one line per segment request would bury the test output
