"""``webrtc://HOST:PORT[/PATH]``: where the viewer page and the WHEP endpoint listen, and who may use them."""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from avatargen.errors import BadInputError

TOKEN_VARIABLE = "AVATARGEN_WEBRTC_TOKEN"
FORM = "webrtc://127.0.0.1:PORT[/PATH]"


@dataclass(frozen=True)
class WebRtcTarget:
    """The address the page and WHEP endpoint listen on (``host``, ``port``), their folder (``path``: ``/`` or
    ``/PATH/``) and the bearer token a viewer must give (None: none asked, loopback only)."""

    host: str
    port: int
    path: str
    token: str | None

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    def url(self, name: str = "") -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{self.path}{name}"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_webrtc_target(text: str, environ: dict[str, str] | None = None) -> WebRtcTarget:
    """The target ``text`` names; a bad one is a ``BadInputError`` that says how to write it. Another address than
    loopback is served only with a token (``AVATARGEN_WEBRTC_TOKEN``): without one anyone who reaches it could
    watch."""
    environ = os.environ if environ is None else environ
    parts = urlsplit(text)
    try:
        port = parts.port
    except ValueError:
        port = None
    host = parts.hostname or "127.0.0.1"
    if parts.scheme.lower() != "webrtc" or port is None or port == 0 or parts.query or parts.fragment:
        raise BadInputError(f"publish target '{text}' is not a WebRTC address; give {FORM}")
    path = "/" + parts.path.strip("/") + "/" if parts.path.strip("/") else "/"
    token = environ.get(TOKEN_VARIABLE) or None
    if not is_loopback(host) and token is None:
        raise BadInputError(f"publish target '{text}' serves beyond this machine: set {TOKEN_VARIABLE}=SECRET (viewers "
                            "then open the page with ?token=SECRET), or serve on 127.0.0.1")  # fmt: skip
    return WebRtcTarget(host, port, path, token)


def bind_problem(target: WebRtcTarget) -> str | None:
    """Why ``target``'s address cannot be listened on now (in use, not this machine's), or None. A check before the
    render starts; the server binds again when it starts (and says so if the port was taken in between)."""
    family = socket.AF_INET6 if ":" in target.host else socket.AF_INET
    try:
        infos = socket.getaddrinfo(target.host, target.port, family, socket.SOCK_STREAM)
    except socket.gaierror as error:
        return f"cannot resolve '{target.host}' ({error.strerror})"
    with socket.socket(infos[0][0], socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(infos[0][4])
        except OSError as error:
            return bind_reason(error, target)
    return None


def bind_reason(error: OSError, target: WebRtcTarget) -> str:
    """One phrase for a failed bind: the port in use, or an address this machine does not have."""
    if error.errno == errno.EADDRINUSE:
        return f"port {target.port} is in use; choose another port"
    if error.errno == errno.EADDRNOTAVAIL:
        return f"'{target.host}' is not an address of this machine; give one of its addresses, or 127.0.0.1"
    if error.errno == errno.EACCES:
        return f"port {target.port} needs privileges; choose a port above 1023"
    return f"{error.strerror}; choose another address or port"
