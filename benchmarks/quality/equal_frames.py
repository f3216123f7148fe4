"""Does the same command give the same video, and how far apart are the videos of settings that should not change
it? Renders one request ``--runs`` times, each in a fresh ``python -m avatargen render`` process from a folder of its
own, its environment padded by a random number of bytes (the stack and the heap start elsewhere) and every other run
with an empty cache folder (``XDG_CACHE_HOME``); then once per ``--setting`` (more overrides; ``ranks=N`` renders
under ``torchrun --nproc-per-node N``). Compares the decoded frames.

    python benchmarks/quality/equal_frames.py --audio A.wav --runs 20 \\
        --setting runtime.offload=block --setting ranks=2 --setting runtime.threads=2 -- runtime.threads=1

Prints how many distinct videos the runs gave, then for each setting whether its video is the first run's, and
where not, how many frames differ and by how many grey levels at most.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from avatargen.eval.video import iter_frames, probe_video  # noqa: E402


def render(image: Path, audio: Path, output: Path, overrides: list[str], ranks: int, fresh_cache: bool,
           pad: int) -> None:  # fmt: skip
    """One render in a process of its own, from ``output``'s folder (the tree's avatargen, whatever is installed)."""
    launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks)] if ranks > 1 else []
    command = [sys.executable, *launcher, "-m", "avatargen", "render", "-i", str(image), "-a", str(audio), "-o",
               str(output), "--quiet", *overrides]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO), "EQUAL_FRAMES_PAD": "x" * pad}
    if fresh_cache:
        env["XDG_CACHE_HOME"] = tempfile.mkdtemp(dir=output.parent, prefix="cache-")
    result = subprocess.run(command, cwd=output.parent, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({result.returncode}):\n{result.stderr[-2000:]}")


def frames(video: Path) -> np.ndarray:
    """(T, H, W, 3) uint8: every decoded frame."""
    info = probe_video(video)
    return np.stack(list(iter_frames(video, (info.width, info.height))))


def digest(video: np.ndarray) -> str:
    """A short name for a video's frames: equal names, equal frames."""
    return hashlib.md5(video.tobytes()).hexdigest()[:12]


def difference(a: np.ndarray, b: np.ndarray) -> str:
    """How the frames of video ``b`` differ from those of ``a``, in words."""
    if a.shape != b.shape:
        return f"other shape {b.shape} (against {a.shape})"
    moved = np.abs(a.astype(np.int16) - b.astype(np.int16)).reshape(len(a), -1).max(axis=1)  # (T,)
    if not moved.any():
        return "identical"
    return (f"{int((moved > 0).sum())} of {len(moved)} frames differ (the first: {int(np.argmax(moved > 0))}), "
            f"up to {int(moved.max())} grey levels; {int((moved > 2).sum())} by more than 2")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--image", type=Path, default=REPO / "examples" / "avatar_1.png")
    parser.add_argument("--audio", type=Path, default=REPO / "examples" / "speech_1.flac")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--setting", action="append", default=[], help="overrides of one setting, space-separated")
    parser.add_argument("--seed", type=int, default=0, help="of the environment padding")
    parser.add_argument("overrides", nargs="*", help="key=value overrides of every render")
    args = parser.parse_args()
    pick = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="equal-frames-") as work:
        counts: Counter[str] = Counter()
        first = other = None  # the first run's frames, and the first frames unlike them
        for run in range(args.runs):
            output = Path(work) / f"run-{run}" / "o.mp4"
            output.parent.mkdir()
            render(args.image.resolve(), args.audio.resolve(), output, args.overrides, 1, run % 2 == 1,
                   pick.randrange(4096))  # fmt: skip
            video = frames(output)
            counts[digest(video)] += 1
            first = video if first is None else first
            if other is None and digest(video) != digest(first):
                other = video
        print(f"{args.runs} runs of `avatargen render -i {args.image.name} -a {args.audio.name} "
              f"{' '.join(args.overrides)}`: {len(counts)} distinct video(s) {dict(counts)}")  # fmt: skip
        if other is not None:
            print(f"  run 0 against the first other: {difference(first, other)}")
        for index, setting in enumerate(args.setting):
            words = setting.split()
            ranks = next((int(w.removeprefix("ranks=")) for w in words if w.startswith("ranks=")), 1)
            overrides = [*args.overrides, *(w for w in words if not w.startswith("ranks="))]
            output = Path(work) / f"setting-{index}" / "o.mp4"
            output.parent.mkdir()
            render(args.image.resolve(), args.audio.resolve(), output, overrides, ranks, False, 0)
            print(f"  {setting}: {difference(first, frames(output))}")

if __name__ == "__main__":
    main()
