"""WebRTC output (``--publish webrtc://HOST:PORT[/PATH]``): a WHEP endpoint and a viewer page served beside the
render, each viewer getting the same H.264 + Opus packets (one encode for all viewers). target.py and plugin.py
import no WebRTC library; sink.py, media.py and server.py need the ``webrtc`` extra (aiortc, aiohttp)."""
