"""Independent checks of media files with the ffmpeg binary alone (no ffprobe, no avatargen code).

Tests verify what avatargen writes with these, so they must not share its code paths.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import imageio_ffmpeg
import numpy as np

PROBE_SAMPLE_RATE = 16000
_FFMPEG = imageio_ffmpeg.get_ffmpeg_exe()
_STREAM = re.compile(r"Stream #\d+:\d+\S*: (Video|Audio): (\w+)(.*)")
_SIZE = re.compile(r", (\d{2,5})x(\d{2,5})")
_FPS = re.compile(r", ([\d.]+) tbr")  # the stream's frame rate; "fps" is an estimate from its duration
_FRAME_COUNT = re.compile(r"frame=\s*(\d+)")


def _ffmpeg(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([_FFMPEG, "-hide_banner", "-nostdin", *args], capture_output=True, timeout=120)


def probe(path: str | Path) -> dict:
    """Stream counts, codecs, size, exact frame count and decoded durations of a media file."""
    header = _ffmpeg("-i", str(path)).stderr.decode(errors="replace")
    result: dict = {"video_streams": 0, "audio_streams": 0, "video_codec": None, "audio_codec": None,
                    "width": None, "height": None, "fps": None, "frames": 0,
                    "video_duration_s": 0.0, "audio_duration_s": 0.0}  # fmt: skip
    for kind, codec, rest in _STREAM.findall(header):
        key = kind.lower()
        result[f"{key}_streams"] += 1
        if result[f"{key}_codec"] is None:
            result[f"{key}_codec"] = codec
        if kind == "Video" and result["width"] is None:
            size, fps = _SIZE.search(rest), _FPS.search(rest)
            result["width"], result["height"] = (int(size.group(1)), int(size.group(2))) if size else (None, None)
            result["fps"] = float(fps.group(1)) if fps else None
    if result["video_streams"]:
        result["frames"] = count_frames(path)
        if result["fps"]:
            result["video_duration_s"] = result["frames"] / result["fps"]
    if result["audio_streams"]:
        decoded = _ffmpeg("-i", str(path), "-map", "0:a:0", "-f", "f32le", "-ac", "1",
                          "-ar", str(PROBE_SAMPLE_RATE), "pipe:1").stdout  # fmt: skip
        result["audio_duration_s"] = len(decoded) / 4 / PROBE_SAMPLE_RATE
    return result


def count_frames(path: str | Path) -> int:
    """Exact number of decodable video frames (decodes the whole stream; -fps_mode passthrough keeps it exact)."""
    proc = _ffmpeg("-i", str(path), "-map", "0:v:0", "-fps_mode", "passthrough", "-f", "null", "-")
    counts = _FRAME_COUNT.findall(proc.stderr.decode(errors="replace"))
    return int(counts[-1]) if counts else 0


def decode_frames(path: str | Path) -> np.ndarray:
    """All video frames as (T, H, W, 3) uint8 RGB."""
    info = probe(path)
    width, height = info["width"], info["height"]
    raw = _ffmpeg("-i", str(path), "-map", "0:v:0", "-fps_mode", "passthrough",
                  "-f", "rawvideo", "-pix_fmt", "rgb24", "pipe:1").stdout  # fmt: skip
    frame_bytes = width * height * 3
    return np.frombuffer(raw[: len(raw) - len(raw) % frame_bytes], np.uint8).reshape(-1, height, width, 3)


def stream_start_times(path: str | Path) -> dict[str, float]:
    """Presentation time of the first decoded video frame and audio sample, in seconds (via showinfo filters)."""
    stderr = _ffmpeg("-i", str(path), "-filter_complex", "[0:v:0]showinfo[v];[0:a:0]ashowinfo[a]",
                     "-map", "[v]", "-map", "[a]", "-f", "null", "-").stderr.decode(errors="replace")  # fmt: skip
    starts = {}
    for name, tag in (("video", "Parsed_showinfo"), ("audio", "Parsed_ashowinfo")):
        match = re.search(re.escape(tag) + r".*?pts_time:\s*(-?[\d.]+)", stderr)
        starts[name] = float(match.group(1)) if match else float("nan")
    return starts


def png_frame_count(path: str | Path, folder: str | Path) -> int:
    """How many PNGs a plain ``ffmpeg -i PATH FOLDER/%04d.png`` writes (its default frame-rate handling: a stream
    that starts before another gets a duplicated first frame)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    _ffmpeg("-i", str(path), str(folder / "%04d.png"))
    return len(list(folder.glob("*.png")))


def header_duration_s(path: str | Path) -> float:
    """The duration the MP4's movie header (``moov/mvhd``) declares, in seconds (0 for a fragmented file's)."""
    import struct

    data = Path(path).read_bytes()
    offset = 0
    while offset + 8 <= len(data):
        size, kind = struct.unpack(">I4s", data[offset : offset + 8])
        if size == 1:
            size = struct.unpack(">Q", data[offset + 8 : offset + 16])[0]
        if kind == b"moov":
            mvhd = data.index(b"mvhd", offset) - 4
            version = data[mvhd + 8]
            if version == 1:
                timescale, duration = struct.unpack(">IQ", data[mvhd + 28 : mvhd + 40])
            else:
                timescale, duration = struct.unpack(">II", data[mvhd + 20 : mvhd + 28])
            return duration / timescale
        if size < 8:
            break
        offset += size
    return 0.0
