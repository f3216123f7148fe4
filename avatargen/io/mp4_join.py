"""Parts of a resumed render: what survived in a partial MP4, and joining parts into one MP4 without re-encoding.

A render that is stopped and resumed writes one fragmented MP4 per run (a *part*); each starts with an IDR keyframe
at a checkpoint frame. The final video is the parts' H.264 streams joined by ffmpeg's concat demuxer (stream copy,
so every frame keeps the exact bits it was encoded with) and the input audio encoded once, in full.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from avatargen.io.audio_mix import AudioMix
from avatargen.io.encoder import ENCODER_AUDIO_RATE, FINISHED_MOVFLAGS, copy_mp4
from avatargen.io.ffmpeg import StderrTail, local_file, start_ffmpeg
from avatargen.io.mp4_boxes import top_level_boxes
from avatargen.io.owned_names import clear_link_folder, remove_name

_FRAME_COUNT = re.compile(r"frame=\s*(\d+)")


def complete_prefix(path: Path) -> int:
    """Bytes of ``path`` up to the end of its last complete fragment (top-level ``mdat`` box); 0 if none.

    After a SIGKILL the last fragment of a fragmented MP4 may be cut anywhere; what precedes it is intact.
    """
    good = 0
    with open(path, "rb") as file:
        for kind, offset, length in top_level_boxes(file, path.stat().st_size):
            if kind == b"mdat":
                good = offset + length
    return good


def salvage_part(path: Path) -> int:
    """Cut ``path`` to its complete fragments (in place) and return how many video frames it holds."""
    keep = complete_prefix(path)
    if keep < path.stat().st_size:
        with open(path, "r+b") as file:
            file.truncate(keep)
    return video_packets(path) if keep else 0


def video_packets(path: Path) -> int:
    """Video packets (= frames: the encoder makes no B-frames) in ``path``, counted by a stream copy (no decoding)."""
    proc = start_ffmpeg(["-i", local_file(path), "-map", "0:v:0", "-c", "copy", "-f", "null", "-"])
    stderr = StderrTail(proc, max_lines=200)
    returncode = proc.wait()
    stderr.join()
    counts = _FRAME_COUNT.findall("\n".join(stderr.lines))
    if returncode != 0 or not counts:
        return 0
    return int(counts[-1])


def join_parts(parts: list[tuple[Path, int]], audio: Path | AudioMix, output: Path, fps: int) -> None:
    """Write ``output``: the first ``frames`` video frames of each ``(part, frames)`` in order, then the audio, cut at
    the end of the video.

    The parts' video is stream-copied (their encoder settings are identical and each starts with an IDR frame, so
    the joined stream decodes exactly as the parts do); the audio is ``audio`` (a file or an ``AudioMix``) encoded
    like ``Encoder`` does.
    """
    # The concat listing names the parts by links with plain names in a folder of their own: a path in the listing
    # would be read as a URL (a protocol prefix) or break the listing (a quote, a newline), whatever it holds.
    links = output.with_name(f".{output.name}.join")
    clear_link_folder(links)  # what a killed join left there (a link at the name as a link)
    links.mkdir()
    lines = ["ffconcat version 1.0"]
    for number, (part, frames) in enumerate(parts):
        os.symlink(part.resolve(), links / f"{number}.mp4")
        # duration places the next part right after this one's last frame; outpoint (half a frame early, robust to
        # rounding) drops the frames a part holds past its checkpoint. Frames never reorder (no B-frames), so
        # cutting the stream there leaves every kept frame decodable.
        lines += [f"file {number}.mp4", f"duration {frames / fps:.6f}", f"outpoint {(frames - 0.5) / fps:.6f}"]
    listing = links / "parts.ffconcat"
    listing.write_text("\n".join(lines) + "\n")
    total_s = sum(frames for _, frames in parts) / fps
    mix = audio if isinstance(audio, AudioMix) else AudioMix((Path(audio),))
    audio_input, audio_map = mix.ffmpeg_args(1, copyts=True)  # -copyts below
    try:
        # -copyts: the concat demuxer shifts its timestamps by the first part's start time, which the AAC priming of
        # its audio makes -21 ms; copied as they are, the video starts at 0 as an uninterrupted render's does, and the
        # finished file's edit list cuts the priming (FINISHED_MOVFLAGS: a plain MP4, its index first).
        copy_mp4(["-copyts", "-f", "concat", "-i", local_file(listing), *audio_input,
                  "-map", "0:v:0", *audio_map, "-c:v", "copy", "-c:a", "aac", "-b:a", "128k",
                  "-ar", str(ENCODER_AUDIO_RATE), "-t", f"{total_s:.6f}", "-movflags", FINISHED_MOVFLAGS],
                 output, what=f"join the parts of '{output}'", full_path=output)  # fmt: skip
    finally:
        remove_name(links)
