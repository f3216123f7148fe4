"""Wall time of one short CLI render (start-up dominates it), median of N runs, for one or more source trees.

Each run is a fresh ``python -m avatargen render`` of a 1 s clip with the shipped model, one thread, as a user runs
it, each tree's modules compiled to bytecode first (as an installed package has them; without, every run compiles
them); the runs of the trees are interleaved so that the machine's noise hits them alike. ``--refused`` times instead a
render refused for a picture that does not exist (exit 2): how long a script's typo takes to be said.

    python benchmarks/speed/startup.py [--runs 3] [--refused] [--tree PATH ...]   (default tree: this checkout)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks.speed.first_byte import compile_tree  # noqa: E402  (one way to compile a tree)


def render_seconds(tree: Path, audio: Path, out: Path, refused: bool = False) -> float:
    """Wall seconds of one render with ``tree`` first on the path (fails loudly if the render fails, or with
    ``refused`` -- its picture missing -- unless it exits 2)."""
    image = out.with_name("missing.png") if refused else tree / "examples" / "avatar_1.png"
    command = [sys.executable, "-m", "avatargen", "render", "-i", str(image), "-a", str(audio), "-o", str(out),
               "runtime.threads=1", "--quiet"]  # fmt: skip
    start = time.perf_counter()
    result = subprocess.run(command, cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True)
    seconds = time.perf_counter() - start
    if result.returncode != (2 if refused else 0):
        raise SystemExit(f"{tree}: exit {result.returncode}: {result.stderr.decode()[-500:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--refused", action="store_true", help="time the refusal of a missing picture instead")
    parser.add_argument("--tree", type=Path, action="append", help="source tree to time (repeatable)")
    args = parser.parse_args()
    trees = [t.resolve() for t in (args.tree or [REPO])]
    for tree in trees:
        compile_tree(tree)
    with tempfile.TemporaryDirectory() as tmp:
        audio = Path(tmp) / "one_second.wav"
        t = np.arange(16000) / 16000
        sf.write(audio, (0.3 * np.sin(2 * np.pi * 220 * t) * np.clip(np.sin(2 * np.pi * 4 * t), 0, None)).astype(np.float32), 16000)
        times: dict[Path, list[float]] = {tree: [] for tree in trees}
        for _ in range(args.runs):
            for tree in trees:
                times[tree].append(render_seconds(tree, audio, Path(tmp) / "out.mp4", args.refused))
    for tree, runs in times.items():
        print(f"{tree}: median {statistics.median(runs):.2f} s  runs {' '.join(f'{r:.2f}' for r in runs)}")


if __name__ == "__main__":
    main()
