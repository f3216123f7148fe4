"""The WHEP endpoint and the viewer page (aiohttp), and one aiortc peer connection per viewer, on an event loop of
their own thread.

WHEP (the IETF WebRTC-HTTP Egress Protocol): a viewer POSTs its SDP offer (``application/sdp``) to ``PATH/whep``
and gets the answer (201, with every ICE candidate: no trickle) and its session's URL (``Location``), which it may
DELETE to leave. ``GET PATH/`` is a minimal player page that does this. An offer that is not SDP, or that offers no
H.264 or no Opus, gets a 4xx that says why, and nothing else changes.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
from importlib.resources import files
from typing import Callable

import aioice.ice
import av
from aiohttp import web
from aiortc import RTCPeerConnection, RTCRtpSender, RTCSessionDescription

from avatargen.errors import BadInputError
from avatargen.io.webrtc.media import PacketTrack
from avatargen.io.webrtc.target import WebRtcTarget, bind_reason

MAX_VIEWERS = 32  # each costs a little CPU (packetising, SRTP) and its bandwidth
MAX_OFFER_BYTES = 64 * 1024
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
VIEWER_PAGE = files("avatargen.io.webrtc").joinpath("viewer.html")


class _Viewer:
    """One viewer's connection and its two tracks."""

    def __init__(self, pc: RTCPeerConnection, video: PacketTrack, audio: PacketTrack) -> None:
        self.pc, self.video, self.audio = pc, video, audio


class WhepServer:
    """Serves ``target`` from ``start()`` to ``stop()``; ``send(video, audio)`` (any thread) hands every viewer the
    next packets. ``ask_key_frame`` is called (on the server's thread) when a viewer needs a key frame."""

    def __init__(self, target: WebRtcTarget, ask_key_frame: Callable[[], None]) -> None:
        self.target = target
        self.ask_key_frame = ask_key_frame
        self.viewers: dict[str, _Viewer] = {}
        self.viewers_seen = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="webrtc", daemon=True)
        self._runner: web.AppRunner | None = None

    # -- lifecycle (the caller's thread) ---------------------------------------------------------------------------

    def start(self) -> None:
        """Listen on the target; a ``BadInputError`` when its address cannot be bound (in use, not this machine's)."""
        _gather_candidates_on(self.target.host)
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(START_TIMEOUT_S)
        except OSError as error:
            self._end_loop()
            raise BadInputError(f"cannot serve WebRTC on {self.target.host}:{self.target.port}: "
                                f"{bind_reason(error, self.target)}") from None  # fmt: skip

    def stop(self) -> None:
        """Every viewer's tracks end and its connection closes; the server stops listening. Idempotent."""
        if not self._thread.is_alive():
            return
        try:
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(STOP_TIMEOUT_S)
        except (TimeoutError, asyncio.TimeoutError):
            pass  # a connection that would not close dies with the loop
        self._end_loop()

    def send(self, video: list[av.Packet], audio: list[av.Packet]) -> None:
        """Hand every viewer these packets (video first: they belong to the same instant). Never blocks."""
        if self._thread.is_alive() and (video or audio):
            self._loop.call_soon_threadsafe(self._offer, video, audio)

    def _end_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(STOP_TIMEOUT_S)

    # -- on the server's thread ------------------------------------------------------------------------------------

    async def _start(self) -> None:
        app = web.Application(client_max_size=MAX_OFFER_BYTES)
        path = self.target.path
        app.router.add_get(path, self._page)
        app.router.add_route("OPTIONS", path + "whep", self._options)
        app.router.add_post(path + "whep", self._offer_sdp)
        app.router.add_delete(path + "whep/{session}", self._leave)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.target.host, self.target.port, reuse_address=True)
        try:
            await site.start()
        except OSError:
            await self._runner.cleanup()
            raise

    async def _stop(self) -> None:
        for viewer in self.viewers.values():
            viewer.video.end()
            viewer.audio.end()
        await asyncio.gather(*(viewer.pc.close() for viewer in self.viewers.values()), return_exceptions=True)
        self.viewers.clear()
        if self._runner is not None:
            await self._runner.cleanup()

    def _offer(self, video: list[av.Packet], audio: list[av.Packet]) -> None:
        for viewer in self.viewers.values():
            for packet in video:
                viewer.video.offer(packet)
            for packet in audio:
                viewer.audio.offer(packet)

    def _headers(self) -> dict[str, str]:
        # The page is served from here; a player on another origin may use the endpoint too (WHEP asks for CORS).
        return {"Access-Control-Allow-Origin": "*", "Access-Control-Allow-Headers": "Authorization, Content-Type",
                "Access-Control-Allow-Methods": "POST, DELETE, OPTIONS", "Access-Control-Expose-Headers": "Location",
                "Cache-Control": "no-store"}  # fmt: skip

    def _refused(self, request: web.Request) -> web.Response | None:
        """401 for a request without the token (when one is set)."""
        token = self.target.token
        if token is None:
            return None
        given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if secrets.compare_digest(given.encode(), token.encode()):
            return None
        return web.Response(status=401, text="a bearer token is needed (Authorization: Bearer TOKEN)\n",
                            headers={**self._headers(), "WWW-Authenticate": "Bearer"})  # fmt: skip

    async def _page(self, request: web.Request) -> web.Response:
        return web.Response(body=VIEWER_PAGE.read_bytes(), content_type="text/html", charset="utf-8",
                            headers={"Cache-Control": "no-store"})  # fmt: skip

    async def _options(self, request: web.Request) -> web.Response:
        return web.Response(status=204, headers={**self._headers(), "Accept-Post": "application/sdp"})

    async def _offer_sdp(self, request: web.Request) -> web.Response:
        if (refused := self._refused(request)) is not None:
            return refused
        if request.content_type != "application/sdp":
            return self._error(415, "the offer must be sent as Content-Type: application/sdp")
        if len(self.viewers) >= MAX_VIEWERS:
            return self._error(503, f"{MAX_VIEWERS} viewers are watching already; try again later")
        try:
            offer = await request.text()
        except (UnicodeDecodeError, web.HTTPException):
            return self._error(400, "the offer is not UTF-8 text")
        pc = RTCPeerConnection()
        try:
            answer, viewer = await self._answer(pc, offer)
        except Exception as error:  # noqa: BLE001 - any offer a viewer sends is answered, never raised into the render
            await pc.close()
            return self._error(400, f"the SDP offer cannot be answered ({str(error) or type(error).__name__}); send a "
                                    "WebRTC offer with a recvonly H.264 video and an Opus audio section")  # fmt: skip
        session = secrets.token_urlsafe(12)
        self.viewers[session] = viewer
        self.viewers_seen += 1

        @pc.on("connectionstatechange")
        async def gone() -> None:
            if pc.connectionState in ("failed", "closed"):
                await self._drop(session)

        self.ask_key_frame()  # it starts with the next frame, not the next scheduled key frame
        return web.Response(status=201, text=answer, content_type="application/sdp",
                            headers={**self._headers(), "Location": f"{self.target.path}whep/{session}"})  # fmt: skip

    async def _answer(self, pc: RTCPeerConnection, offer: str) -> tuple[str, _Viewer]:
        """Answer ``offer`` with this stream's two tracks, H.264 and Opus only (the packets are encoded once)."""
        if "m=video" not in offer or "m=audio" not in offer:
            raise ValueError("it must have a video and an audio section")
        video, audio = PacketTrack("video", self.ask_key_frame), PacketTrack("audio")
        for track, mimes in ((video, ("video/h264", "video/rtx")), (audio, ("audio/opus",))):
            # made before the offer is read, so that the offer's sections take them and their codecs
            transceiver = pc.addTransceiver(track, direction="sendonly")
            capabilities = RTCRtpSender.getCapabilities(track.kind).codecs
            transceiver.setCodecPreferences([c for c in capabilities if c.mimeType.lower() in mimes])
        await pc.setRemoteDescription(RTCSessionDescription(sdp=offer, type="offer"))
        await pc.setLocalDescription(await pc.createAnswer())
        return pc.localDescription.sdp, _Viewer(pc, video, audio)

    async def _leave(self, request: web.Request) -> web.Response:
        if (refused := self._refused(request)) is not None:
            return refused
        session = request.match_info["session"]
        if session not in self.viewers:
            return self._error(404, "no such session (it ended already)")
        await self._drop(session)
        return web.Response(status=200, headers=self._headers())

    async def _drop(self, session: str) -> None:
        viewer = self.viewers.pop(session, None)
        if viewer is not None:
            viewer.video.end()
            viewer.audio.end()
            await viewer.pc.close()

    def _error(self, status: int, reason: str) -> web.Response:
        return web.Response(status=status, text=reason + "\n", headers=self._headers())


def _gather_candidates_on(host: str) -> None:
    """Media on the address the page is served on: aioice offers every interface's address but loopback's, so a
    server on loopback would send its media to other interfaces' addresses. Loopback (or one given address) is
    then the one candidate; ``0.0.0.0`` / ``::`` keep every interface."""
    if host in ("0.0.0.0", "::", ""):
        return
    address = "127.0.0.1" if host == "localhost" else host
    aioice.ice.get_host_addresses = lambda use_ipv4, use_ipv6: [address]


logging.getLogger("aioice").setLevel(logging.WARNING)
