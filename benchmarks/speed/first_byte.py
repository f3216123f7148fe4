"""From the command to the first byte of MPEG-TS on stdout (``avatargen render ... -o -``), as a user waits for it.

Each run is a fresh ``python -m avatargen render -i IMAGE -a AUDIO -o - -q [KEY=VALUE ...]`` process; the time is from
just before it is started to the first byte it writes on stdout (the process is then killed: the rest of the render
is not what is measured). By default every tree gets a copy of this machine's cache folder and one untimed render of
each picture first, so each timed run finds what a picture's first render kept (its faces, face mesh and photo
verdict, its reference encoding); ``--new-pictures`` gives every run a cache folder without them (a picture never
rendered before). Each tree's modules are compiled to bytecode first, as an installed package has them: a tree whose
``__pycache__`` is missing (``PYTHONDONTWRITEBYTECODE``, a fresh worktree) compiles every module on every run, ~0.15 s
that would be counted against it. The runs of the trees and pictures are interleaved so that the machine's noise hits
them alike.
``--imports`` also runs each picture once with ``python -X importtime`` and says which heavy modules its render
imported (torch, transformers, mediapipe, dlib) and the seconds each import took.

    python benchmarks/speed/first_byte.py [--image PATH ...] [--audio PATH] [--runs 5] [--tree PATH ...]
                                          [--new-pictures] [--imports] [KEY=VALUE ...]

Defaults: skimage's astronaut (a photograph) and examples/avatar_1.png (a cartoon), examples/speech_1.flac (8 s),
this checkout.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "mediapipe", "dlib")


def _command(image: Path, audio: Path, overrides: list[str], *python_flags: str) -> list[str]:
    return [sys.executable, *python_flags, "-m", "avatargen", "render", "-i", str(image), "-a", str(audio), "-o", "-",
            "-q", *overrides]  # fmt: skip


def compile_tree(tree: Path) -> None:
    """Bytecode for every module of ``tree``'s package, as ``pip install`` leaves it (written whatever
    ``PYTHONDONTWRITEBYTECODE`` says)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "avatargen")], check=True)


def first_byte_s(tree: Path, cache: Path, command: list[str]) -> float:
    """Seconds from starting ``command`` in ``tree`` to its first byte on stdout."""
    env = {**os.environ, "PYTHONPATH": str(tree), "XDG_CACHE_HOME": str(cache)}
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               start_new_session=True)  # fmt: skip
    try:
        if not process.stdout.read(1):
            raise SystemExit(f"no output from {' '.join(command)}:\n{process.stderr.read().decode()[-2000:]}")
        return time.perf_counter() - start
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the render and its ffmpeg
        process.wait()


def imported(tree: Path, cache: Path, image: Path, audio: Path, overrides: list[str]) -> list[str]:
    """The ``HEAVY`` modules a whole render of ``image`` imports, each with the seconds its import took, its own
    imports included (``python -X importtime``, which adds its own bookkeeping: 5-15 % more than a plain import)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "XDG_CACHE_HOME": str(cache)}
    result = subprocess.run(_command(image, audio, overrides, "-X", "importtime"), cwd=tree, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    seconds: dict[str, float] = {}
    for line in result.stderr.splitlines():  # "import time: <self us> | <cumulative us> | <indent><name>"
        if line.startswith("import time") and line.count("|") == 2:
            _, cumulative, name = line.split("|")
            if name.strip() in HEAVY and cumulative.strip().isdigit():
                seconds[name.strip()] = max(seconds.get(name.strip(), 0.0), int(cumulative) / 1e6)
    return [f"{name} {seconds[name]:.2f} s" for name in HEAVY if name in seconds]


def cache_copy(folder: Path, name: str, new_pictures: bool) -> Path:
    """A copy of this machine's cache folder (without what pictures left in it, for ``new_pictures``)."""
    home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "avatargen"
    target = folder / name
    if home.exists():
        ignore = shutil.ignore_patterns("faces", "references") if new_pictures else None
        shutil.copytree(home, target / "avatargen", ignore=ignore)
    else:
        (target / "avatargen").mkdir(parents=True)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", type=Path, action="append", default=[])
    parser.add_argument("--audio", type=Path, default=REPO / "examples" / "speech_1.flac")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tree", type=Path, action="append", default=[])
    parser.add_argument("--new-pictures", action="store_true")
    parser.add_argument("--imports", action="store_true")
    parser.add_argument("overrides", nargs="*", default=[])
    args = parser.parse_args()
    trees = [tree.resolve() for tree in args.tree] or [REPO]
    for tree in trees:
        compile_tree(tree)
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        images = [image.resolve() for image in args.image]
        if not images:
            from PIL import Image
            from skimage import data

            Image.fromarray(data.astronaut()).save(folder / "astronaut.png")
            images = [folder / "astronaut.png", REPO / "examples" / "avatar_1.png"]
        audio = args.audio.resolve()
        homes = {tree: cache_copy(folder, f"cache{i}", False) for i, tree in enumerate(trees)}
        for tree in trees:  # each picture's first render: what a later one finds in the cache
            for image in images:
                first_byte_s(tree, homes[tree], _command(image, audio, args.overrides))
        times: dict[tuple[Path, Path], list[float]] = {}
        for run in range(args.runs):
            for tree in trees:
                for image in images:
                    cache = cache_copy(folder, f"new{run}", True) if args.new_pictures else homes[tree]
                    seconds = first_byte_s(tree, cache, _command(image, audio, args.overrides))
                    times.setdefault((tree, image), []).append(seconds)
                    if args.new_pictures:
                        shutil.rmtree(cache)
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), "?")  # fmt: skip
        load = os.getloadavg()[0]
        pictures = "new pictures" if args.new_pictures else "pictures rendered once before"
        print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {cpu}, {os.cpu_count()} CPUs, load {load:.1f}; "
              f"{pictures}; audio {audio.name}; {' '.join(args.overrides) or 'defaults'}\n")  # fmt: skip
        imports = " imports |" if args.imports else ""
        print(f"| picture | tree | first byte, median (min-max) of {args.runs}, s |{imports}")
        print("|---|---|---|" + ("---|" if args.imports else ""))
        for image in images:
            for tree in trees:
                values = times[(tree, image)]
                median, low, high = statistics.median(values), min(values), max(values)
                row = f"| {image.name} | {tree} | {median:.3f} ({low:.3f}-{high:.3f}) |"
                if args.imports:
                    heavy = imported(tree, homes[tree], image, audio, args.overrides)
                    row += f" {', '.join(heavy) or 'none of ' + '/'.join(HEAVY)} |"
                print(row)


if __name__ == "__main__":
    main()
