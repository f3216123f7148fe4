"""What the pipeline hands its frames to: an MP4 encoder, a live publisher, a pacer, a null sink; and the frame sinks
a render opens beside its encoder, each one file that registers itself (``register_sink``) or an entry point of the
``avatargen.sinks`` group (a sink in another package)."""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Callable, Protocol

import numpy as np

ENTRY_POINT_GROUP = "avatargen.sinks"


class FrameSink(Protocol):
    """Anything that takes uint8 RGB frames (T, H, W, 3) in timeline order (an MP4 writer, a live publisher...).

    A sink opened by a render (``SinkFactory``) may also have ``close(finished: bool)``: called once when the render
    ends, ``finished`` False when it stopped or failed."""

    def write(self, frames: np.ndarray) -> None: ...


@dataclass(frozen=True)
class SinkContext:
    """What a render tells a sink factory: the frames' size and rate, the first frame's index on the timeline (a
    resumed render starts past 0), the output file (None: live outputs only) and the resolved config."""

    width: int
    height: int
    fps: int
    start_frame: int
    output: Path | None
    config: Any


# (context) -> a sink for this render, or None: the factory has nothing to do for it.
SinkFactory = Callable[[SinkContext], "FrameSink | None"]

_registered: list[SinkFactory] = []


def register_sink(factory: SinkFactory) -> None:
    """Open a sink from ``factory`` in every later render of this process, beside its encoder (after compositing:
    the frames the MP4 shows). Registering the same factory twice opens it once."""
    if factory not in _registered:
        _registered.append(factory)


def unregister_sink(factory: SinkFactory) -> None:
    """Undo ``register_sink``."""
    if factory in _registered:
        _registered.remove(factory)


def sink_factories() -> list[SinkFactory]:
    """The registered factories, then the ``avatargen.sinks`` entry points' (each names a factory)."""
    return [*_registered, *(entry.load() for entry in entry_points(group=ENTRY_POINT_GROUP))]
