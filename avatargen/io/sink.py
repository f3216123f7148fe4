"""What the pipeline hands its frames to: an MP4 encoder, a live publisher, a pacer, a null sink; and the sinks a
render opens beside its encoder, each one file that registers itself (``register_sink``), an entry point of the
``avatargen.sinks`` group (a sink in another package), or a built-in publish scheme (``webrtc://``).

A render sink gets the frames the MP4 shows and their audio (``write_audio``: 48 kHz stereo s16le, the track from
the sink's first frame on), behind the real-time pacer when the render is paced (``--realtime``), and is closed once.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Protocol, Union

import numpy as np

from avatargen.config.families import load_object  # the registry's one way to import a module by its name

if TYPE_CHECKING:  # the schema is a layer below; named for the types only
    from avatargen.config.schema import Config

ENTRY_POINT_GROUP = "avatargen.sinks"
SINK_AUDIO_RATE = 48000  # the audio a render sink gets: stereo s16le at this rate (the encoder's track)
# Publish schemes avatargen serves itself, imported only when a target of theirs is given (optional extras).
BUILT_IN_SCHEMES = {"webrtc": "avatargen.io.webrtc.plugin:PLUGIN"}


class FrameSink(Protocol):
    """Anything that takes uint8 RGB frames (T, H, W, 3) in timeline order (an MP4 writer, a live publisher...)."""

    def write(self, frames: np.ndarray) -> None: ...


class RenderSink(FrameSink, Protocol):
    """A sink a render opens (``SinkFactory``): its frames, their audio and one ``close``.

    ``write_audio(pcm)``: the audio track as it goes out (48 kHz stereo s16le, ``SINK_AUDIO_RATE``), in order, from
    the first frame on; frame k's audio (bytes ``[k, k+1) * 4 * 48000 / fps``) is handed over no later than frame k.
    ``close(finished)``: called once when the render ends, ``finished`` False when it stopped or failed. A paced
    render (``--realtime``) calls ``write`` on the wall clock from the pacer's thread: a sink must not block there."""

    def write_audio(self, pcm: bytes) -> None: ...

    def close(self, finished: bool) -> None: ...


@dataclass(frozen=True)
class SinkContext:
    """What a render tells a sink factory: the frames' size and rate, the first frame's index on the timeline (a
    resumed render starts past 0), the output file (None: live outputs only), whether frames come on the wall clock
    (``paced``), the ``--publish`` targets of the sink's schemes, and the typed, resolved config."""

    width: int
    height: int
    fps: int
    start_frame: int
    output: Path | None
    config: Config
    paced: bool = False
    targets: tuple[str, ...] = ()

    def audio_bytes(self, frames: int) -> int:
        """Bytes of ``write_audio`` PCM from the sink's first frame to the end of its ``frames``-th (rate exact)."""
        return frames * SINK_AUDIO_RATE // self.fps * 4


# (context) -> a sink for this render, or None: the factory has nothing to do for it.
SinkFactory = Callable[[SinkContext], "RenderSink | None"]


@dataclass(frozen=True)
class SinkPlugin:
    """A sink with what it claims: ``open`` makes its sink for a render; ``schemes`` are the ``--publish`` URL
    schemes it serves (``webrtc`` for ``webrtc://...``; none: it opens in every render); ``check(target, config)``
    refuses a bad target with a ``BadInputError`` before the render starts (optional)."""

    open: SinkFactory
    schemes: tuple[str, ...] = ()
    check: Callable[[str, Config], None] | None = None


_registered: list[SinkPlugin] = []


def _as_plugin(entry: Union[SinkPlugin, SinkFactory]) -> SinkPlugin:
    return entry if isinstance(entry, SinkPlugin) else SinkPlugin(open=entry)


def register_sink(sink: Union[SinkPlugin, SinkFactory]) -> None:
    """Open ``sink`` (a ``SinkPlugin``, or a bare factory: every render) in every later render of this process,
    beside its encoder (after compositing: the frames the MP4 shows). Registering it twice opens it once."""
    plugin = _as_plugin(sink)
    if plugin not in _registered:
        _registered.append(plugin)


def unregister_sink(sink: Union[SinkPlugin, SinkFactory]) -> None:
    """Undo ``register_sink``."""
    plugin = _as_plugin(sink)
    if plugin in _registered:
        _registered.remove(plugin)


def scheme_of(target: str) -> str | None:
    """``webrtc`` for ``webrtc://...``; None for a path."""
    head, sep, _ = target.partition("://")
    return head.lower() if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", head) else None


def _declared() -> list[SinkPlugin]:
    """The registered plugins, then the ``avatargen.sinks`` entry points' (each names a plugin or a factory)."""
    return [*_registered, *_entry_point_plugins()]


@functools.cache
def _entry_point_plugins() -> tuple[SinkPlugin, ...]:
    """The ``avatargen.sinks`` entry points' plugins, read once a process: finding them reads every installed
    distribution's metadata (~5 ms here), and a render asks five times before its first frame."""
    return tuple(_as_plugin(entry.load()) for entry in entry_points(group=ENTRY_POINT_GROUP))


def sink_plugins(targets: list[str] | tuple[str, ...] = ()) -> list[SinkPlugin]:
    """The declared plugins and the built-in schemes that ``targets`` use (imported only then: their libraries are
    optional extras)."""
    plugins = _declared()
    claimed = {scheme for plugin in plugins for scheme in plugin.schemes}
    for scheme in sorted({scheme_of(t) for t in targets} - claimed - {None}):
        if scheme in BUILT_IN_SCHEMES:
            plugins.append(load_object(BUILT_IN_SCHEMES[scheme]))
    return plugins


def sink_schemes(targets: list[str] | tuple[str, ...]) -> set[str]:
    """The schemes of ``targets`` that a sink serves (built-in or registered), without importing a built-in."""
    registered = {scheme for plugin in _declared() for scheme in plugin.schemes}
    return {s for t in targets if (s := scheme_of(t)) is not None and (s in registered or s in BUILT_IN_SCHEMES)}


def encoder_targets(config: Config) -> list[str]:
    """The ``--publish`` targets (``output.publish``) left for the encoder: those of a sink's scheme are checked by
    it (its ``check`` raises a ``BadInputError`` for a bad one) and left out."""
    targets = list(config.output.publish)
    served = sink_schemes(targets)
    for plugin in sink_plugins([t for t in targets if scheme_of(t) in served]):
        for target in targets:
            if plugin.check is not None and scheme_of(target) in plugin.schemes:
                plugin.check(target, config)
    return [t for t in targets if scheme_of(t) not in served]
