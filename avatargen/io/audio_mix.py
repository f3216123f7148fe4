"""The audio a video carries: one file, or several speakers' files mixed by ffmpeg as the model heard them (``para``:
at once, summed; ``add``: one after the other), at the files' own quality, for the encoder and the part joiner."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from avatargen.io.ffmpeg import local_file, read_input_info

# An audio stream that starts after its file does (a video's sound track delayed against its picture) gets silence in
# front, from 0: the model, the encoder, a resume's seek and the joiner all read the file's own timeline. A stream
# that starts with its file is untouched (async=1: the start alone is corrected, nothing later).
FROM_FILE_START = "aresample=async=1:first_pts=0"


@dataclass(frozen=True)
class AudioMix:
    """Audio files and how they share the timeline (``avatargen/io/audio_tracks.py``)."""

    paths: tuple[Path, ...]
    arrangement: str = "para"

    def ffmpeg_args(self, first_input: int, start_s: float = 0.0, copyts: bool = False) -> tuple[list[str], list[str]]:
        """(input arguments, mapping arguments) adding the mixed audio as ffmpeg's input(s) number ``first_input``
        on, from ``start_s`` seconds of the timeline on; the mapping names one audio stream. ``copyts``: for an
        ffmpeg run with ``-copyts``, which keeps each file's start time (MPEG-TS's 1.4 s): it is taken off here."""
        inputs = [arg for path in self.paths
                  for arg in (*(_start_offset(path) if copyts else ()), "-i", local_file(path))]  # fmt: skip
        if len(self.paths) == 1:
            seek = ["-ss", f"{start_s:.6f}"] if start_s else []
            return [*seek, *inputs], ["-filter_complex", f"[{first_input}:a:0]{FROM_FILE_START}[mix]", "-map", "[mix]"]
        labels = [f"[{first_input + k}:a:0]" for k in range(len(self.paths))]
        # one sample format and layout before joining (concat needs them equal; amix gets the same input)
        parts = [f"{label}{FROM_FILE_START},aresample=48000,aformat=sample_fmts=fltp:channel_layouts=stereo[p{k}]"
                 for k, label in enumerate(labels)]  # fmt: skip
        joined = "".join(f"[p{k}]" for k in range(len(self.paths)))
        if self.arrangement == "add":
            mix = f"{joined}concat=n={len(self.paths)}:v=0:a=1"
        else:
            mix = f"{joined}amix=inputs={len(self.paths)}:duration=longest:normalize=0"
        graph = ";".join(parts) + f";{mix},atrim=start={start_s:.6f},asetpts=PTS-STARTPTS[mix]"
        return inputs, ["-filter_complex", graph, "-map", "[mix]"]


def _start_offset(path: Path) -> list[str]:
    """The input option that moves ``path``'s timestamps back by its file's start time (none where it is 0)."""
    start = read_input_info(path).start_s
    return ["-itsoffset", f"{-start:.6f}"] if start else []
