"""Where the encoded video goes: the MP4 file, an HLS playlist, an RTMP ingest, stdout.

One x264/AAC encode feeds every output: with more than one, ffmpeg's ``tee`` muxer writes the same packets to each
(``Output.tee_slave``). An output that must not stop the render when it fails (a live target under
``output.on_publish_failure=drop``) is marked ``onfail=ignore``: ffmpeg then reports it and goes on with the rest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from avatargen.errors import BadInputError
from avatargen.io.ffmpeg import local_file
from avatargen.io.owned_names import another_renders_name
from avatargen.io.targets import write_problem

# The fragmented-MP4 flags every MP4 avatargen writes uses (see Encoder for why each is there).
MP4_MOVFLAGS = "+frag_keyframe+empty_moov+delay_moov+default_base_moof"
PUBLISH_FIX = "give DIR/NAME.m3u8 (HLS), rtmp://HOST[:PORT]/APP/KEY, or webrtc://127.0.0.1:PORT (with --realtime)"


class OutputKind(StrEnum):
    """What an ``Output`` is: a file on this machine (MP4, an HLS playlist and its segments), a URL, or stdout."""

    MP4 = "mp4"
    HLS = "hls"
    RTMP = "rtmp"
    STDOUT = "stdout"

    @property
    def is_file(self) -> bool:
        return self in (OutputKind.MP4, OutputKind.HLS)


@dataclass(frozen=True)
class Output:
    """One ffmpeg output: a muxer, its options and its target (a path or URL)."""

    kind: OutputKind
    target: str  # as the user gave it: a file path (mp4, hls), a URL (rtmp) or pipe:1 (stdout)
    muxer: str
    options: dict[str, str] = field(default_factory=dict)
    live: bool = False  # a publish target (may be dropped on failure), not the user's primary output
    opened_as: str | None = None  # the URL ffmpeg opens instead of the target (a file avatargen created: fd_url)

    @property
    def label(self) -> str:
        """How messages name it: the path or URL the user gave."""
        return "stdout" if self.kind is OutputKind.STDOUT else self.target

    @property
    def url(self) -> str:
        """What ffmpeg is given: a file output as an explicit local file (``file:``), never a protocol."""
        if self.opened_as is not None:
            return self.opened_as
        return local_file(self.target) if self.kind.is_file else self.target

    def args(self) -> list[str]:
        """ffmpeg arguments when this is the only output."""
        args = ["-f", self.muxer]
        for key, value in self.options.items():
            args += [f"-{key}", value]
        return args + [self.url]

    def tee_slave(self, ignore_failure: bool) -> str:
        """This output as one slave of ffmpeg's tee muxer: ``[f=muxer:key=value...:onfail=...]target``."""
        options = {"f": self.muxer, **self.options, "onfail": "ignore" if ignore_failure else "abort"}
        spec = ":".join(f"{key}={_tee_escape(_option_escape(value))}" for key, value in options.items())
        return f"[{spec}]{_tee_escape(self.url)}"


def _option_escape(value: str) -> str:
    """Escape a value for the ``key=value:key=value`` option list of a tee slave."""
    return re.sub(r"([\\':=\[\]])", r"\\\1", value)


def _tee_escape(text: str) -> str:
    """Escape text for the tee muxer's slave list (``|`` separates slaves, ``[...]`` holds the options)."""
    return re.sub(r"([\\'|\[\]:])", r"\\\1", text)


def tee_target(outputs: list[Output], drop_failed_live: bool) -> str:
    """The tee muxer's output argument for ``outputs`` (live ones ``onfail=ignore`` when ``drop_failed_live``)."""
    return "|".join(o.tee_slave(ignore_failure=o.live and drop_failed_live) for o in outputs)


def mp4_output(path: Path, opened_as: str | None = None) -> Output:
    """The fragmented MP4 at ``path`` (``opened_as``: the URL ffmpeg opens it by, a descriptor it inherits)."""
    return Output(OutputKind.MP4, str(path), "mp4", {"movflags": MP4_MOVFLAGS, "flush_packets": "1"}, opened_as=opened_as)


def stdout_output() -> Output:
    """MPEG-TS on stdout: a stream any player or tool reads from a pipe (``| ffplay -``).

    Each video PES carries its length (frames under 64 KiB): a demuxer then hands a frame on as soon as its last
    byte arrives, where with the length left out it waits for the next frame's first (a frame of latency, 40 ms)."""
    return Output(OutputKind.STDOUT, "pipe:1", "mpegts", {"flush_packets": "1", "omit_video_pes_length": "0"})


def hls_output(playlist: Path, segment_s: float, window: int) -> Output:
    """An HLS live playlist and its MPEG-TS segments (``NAME_00000.ts`` ...) beside it, one per keyframe interval.

    ``window`` 0 keeps every segment (an EVENT playlist a late viewer can rewind, closed with ENDLIST when the render
    ends); N > 0 keeps the last N segments and deletes older ones (constant disk for open-ended sessions).
    """
    flags = "independent_segments+temp_file" + ("+delete_segments" if window else "")
    options = {
        "hls_time": f"{segment_s:g}",
        "hls_list_size": str(window),
        "hls_flags": flags,
        # Absolute, not file:, because the muxer deletes old segments with unlink(), which takes no URL; an absolute
        # path is never read as a protocol.
        "hls_segment_filename": str(playlist.absolute().with_name(f"{playlist.stem}_%05d.ts")),
        "flush_packets": "1",
    }
    if not window:
        options["hls_playlist_type"] = "event"
    return Output(OutputKind.HLS, str(playlist), "hls", options, live=True)


def rtmp_output(url: str, timeout_s: float = 5.0) -> Output:
    """An FLV stream pushed to an RTMP ingest (nginx-rtmp, a streaming service, ``ffmpeg -listen 1``).

    ``timeout_s`` bounds every network read and write: an ingest that stops answering (without closing the
    connection) fails after it, instead of blocking the encoder, and with it the file and the render, for ever.
    """
    options = {"flvflags": "no_duration_filesize", "rw_timeout": str(round(timeout_s * 1e6))}
    return Output(OutputKind.RTMP, url, "flv", options, live=True)


def folder_write_problem(target: Path) -> str | None:
    """Why ``target``'s folder cannot take a file, or None, so an unwritable place fails before rendering, not as an
    ffmpeg error mid-render. Creates nothing (``io.targets.write_problem``): the render makes the folders once its
    inputs are known to be good."""
    return write_problem(target)


def parse_publish_target(text: str, segment_s: float, hls_window: int, timeout_s: float = 5.0) -> Output:
    """``--publish TARGET``: ``DIR/NAME.m3u8`` (HLS) or ``rtmp://``/``rtmps://`` (RTMP push, network ``timeout_s``)."""
    if re.match(r"^rtmps?://[^/]+/.+", text):
        return rtmp_output(text, timeout_s)
    if "://" in text:
        raise BadInputError(f"publish target '{text}' uses an unsupported protocol; {PUBLISH_FIX}")
    path = Path(text).expanduser()
    if path.suffix.lower() != ".m3u8":
        raise BadInputError(f"publish target '{text}' is neither an HLS playlist nor an RTMP URL; {PUBLISH_FIX}")
    if "%" in str(path):  # the HLS muxer reads '%d', '%v' in its names as patterns, and no escape survives it
        raise BadInputError(f"publish target '{text}' holds a '%', which ffmpeg's HLS muxer reads as a pattern; "
                            "choose a playlist path without '%'")  # fmt: skip
    shared = another_renders_name(path, "publish target")
    if shared is not None:
        raise BadInputError(shared)
    problem = folder_write_problem(path)
    if problem is not None:
        raise BadInputError(f"cannot write the HLS playlist folder '{path.parent}' ({problem}); choose a writable folder")
    return hls_output(path, segment_s, hls_window)


@dataclass(frozen=True)
class TeeEvent:
    """What one line of ffmpeg's stderr says about the tee muxer's slaves (outputs, by index)."""

    kind: str  # "open_failed" (reason), "dropped" (slave, reason), "aborted" (slave), "all_failed"
    slave: int | None = None
    reason: str | None = None


_OPEN_FAILED = re.compile(r"Slave '.*': error opening: (.+)$")  # precedes the slave's "failed" line
_DROPPED = re.compile(r"Slave muxer #(\d+) failed: (.+?), continuing with")  # onfail=ignore
_ABORTED = re.compile(r"Slave muxer #(\d+) failed, aborting")  # onfail=abort: ffmpeg stops


def tee_event(line: str) -> TeeEvent | None:
    """The tee event an ffmpeg stderr line reports, if any."""
    if match := _OPEN_FAILED.search(line):
        return TeeEvent("open_failed", reason=match.group(1))
    if match := _DROPPED.search(line):
        return TeeEvent("dropped", int(match.group(1)), match.group(2))
    if match := _ABORTED.search(line):
        return TeeEvent("aborted", int(match.group(1)))
    if "All tee outputs failed" in line:  # the last slave went (onfail=ignore): nothing is left
        return TeeEvent("all_failed")
    return None

