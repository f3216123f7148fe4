"""Overlapped emission against inline emission: whole renders through the CLI, interleaved, in one run.

Each round renders the same image and audio with ``runtime.overlap=true`` and ``=false`` (the order alternating),
and prints each render's RTF, time to first frame and stage times, then the median RTF of each and their ratio.
Run it on an otherwise idle machine: two threads that compete with other work measure nothing.

    python benchmarks/speed/overlap_speed.py [--image examples/avatar_1.png] [--seconds 30] [--rounds 2] [override ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf

REPO = Path(__file__).resolve().parents[2]


def speech(seconds: float, path: Path) -> Path:
    """The example sentences, concatenated and repeated to ``seconds``."""
    parts = []
    for k in (1, 2, 3):
        wave, rate = sf.read(REPO / "examples" / f"speech_{k}.flac", dtype="float32")
        parts.append(wave if wave.ndim == 1 else wave.mean(axis=1))
    one = np.concatenate(parts)
    sf.write(path, np.resize(one, int(seconds * rate)), rate)
    return path


def render(image: Path, audio: Path, out: Path, overlap: bool, overrides: list[str]) -> dict:
    command = [sys.executable, "-m", "avatargen", "render", "-i", str(image), "-a", str(audio), "-o", str(out),
               "--json", "-q", f"runtime.overlap={str(overlap).lower()}", *overrides]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--image", type=Path, default=REPO / "examples" / "avatar_1.png")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    rtf: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as folder:
        audio = speech(args.seconds, Path(folder) / "speech.wav")
        for round_ in range(args.rounds):
            for overlap in ((True, False) if round_ % 2 == 0 else (False, True)):
                report = render(args.image, audio, Path(folder) / "out.mp4", overlap, args.overrides)
                rtf[overlap].append(report["rtf"])
                stages = " ".join(f"{k} {v:.2f}" for k, v in report["stage_s"].items())
                print(f"overlap={str(overlap).lower():5s} RTF {report['rtf']:.3f}  TTFF {report['ttff_s']:.2f} s  "
                      f"stage s: {stages}", flush=True)  # fmt: skip
    on, off = statistics.median(rtf[True]), statistics.median(rtf[False])
    print(f"median RTF: overlap {on:.3f}, inline {off:.3f}, ratio {on / off:.2f}")


if __name__ == "__main__":
    main()
