"""The WebRTC sink's registration (``webrtc://``): checked before the render starts, opened when it does. Needs the
``webrtc`` extra only when a ``webrtc://`` target is given."""

from __future__ import annotations

from avatargen.config.schema import Config
from avatargen.errors import BadInputError, MissingExtraError
from avatargen.io.sink import SinkContext, SinkPlugin
from avatargen.io.webrtc.target import bind_problem, parse_webrtc_target

INSTALL = "pip install 'avatargen[webrtc]'"


def check_webrtc_target(text: str, config: Config) -> None:
    """A ``BadInputError`` naming the fix for a target that cannot be served: the extra missing, a bad address, a
    port in use, a render that is not paced."""
    target = parse_webrtc_target(text)
    if not _extra_installed():
        raise MissingExtraError(f"--publish {text} needs the WebRTC libraries: {INSTALL}")
    if not config.output.realtime:
        raise BadInputError(f"--publish {text} plays the render as it is made: add --realtime (a browser shows frames "
                            "on the clock)")  # fmt: skip
    problem = bind_problem(target)
    if problem is not None:
        raise BadInputError(f"cannot serve WebRTC on {target.host}:{target.port}: {problem}")


def _extra_installed() -> bool:
    try:
        import aiohttp  # noqa: F401
        import aiortc  # noqa: F401
    except ImportError:
        return False
    return True


def open_webrtc_sinks(context: SinkContext):
    """The sink that serves this render's ``webrtc://`` target (one per render)."""
    from avatargen.io.webrtc.sink import WebRtcSink  # the extra's libraries, imported only here

    if len(context.targets) > 1:
        raise BadInputError("give one --publish webrtc:// target per render (any number of viewers can watch it)")
    return WebRtcSink(parse_webrtc_target(context.targets[0]), context)


PLUGIN = SinkPlugin(open=open_webrtc_sinks, schemes=("webrtc",), check=check_webrtc_target)
