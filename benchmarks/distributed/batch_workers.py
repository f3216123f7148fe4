"""Batch workers vs threads (a benchmark, not CI): the same jobs rendered by W workers of T threads each.

Jobs per minute over the whole batch, and the tail: seconds from the start of the last job to the end of the batch
(what a long last job costs when nobody can help with it).

    python benchmarks/distributed/batch_workers.py --jobs 8 --seconds 2 [override ...]
        runs "2 workers x 1 thread" and "1 worker x 2 threads" over the same 8 jobs of 2 s each
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.conftest import write_face_png, write_speechlike_wav  # noqa: E402

_DONE = re.compile(r": job \d+ ok: .* frames in ([\d.]+) s")


def run(jobs: Path, out: Path, workers: int, threads: int, overrides: list[str]) -> dict[str, float]:
    """Start ``workers`` batch workers with ``threads`` threads each; returns jobs per minute and the tail."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "avatargen", "batch", str(jobs), "--out-dir", str(out), *overrides,
               f"runtime.threads={threads}"]  # fmt: skip
    starts: list[float] = []  # when each job started: the time its "job N ok: ... in S s" line came, minus S

    def read(process: subprocess.Popen) -> None:
        for line in process.stderr:
            if (match := _DONE.search(line)) is not None:
                starts.append(time.time() - float(match.group(1)))

    started = time.time()
    processes = [subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                 for _ in range(workers)]  # fmt: skip
    readers = [threading.Thread(target=read, args=(p,)) for p in processes]
    for reader in readers:
        reader.start()
    for process, reader in zip(processes, readers):
        process.wait()
        reader.join()
        if process.returncode != 0:
            raise SystemExit(f"a worker failed (exit {process.returncode})")
    ended = time.time()
    return {"wall_s": round(ended - started, 1), "jobs_per_min": round(len(starts) / (ended - started) * 60, 2),
            "tail_s": round(ended - max(starts), 1) if starts else None}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=2.0, help="audio length of each job")
    parser.add_argument("overrides", nargs="*", default=["model.weights=random"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        write_face_png(root / "face.png")
        write_speechlike_wav(root / "a.wav", args.seconds)
        jobs = root / "jobs.jsonl"
        jobs.write_text("".join(json.dumps({"image": "face.png", "audio": "a.wav", "output": f"v{i}.mp4"}) + "\n"
                                for i in range(args.jobs)))  # fmt: skip
        for workers, threads in ((2, 1), (1, 2)):
            result = run(jobs, root / f"out-{workers}x{threads}", workers, threads, args.overrides)
            print(json.dumps({"workers": workers, "threads": threads, "jobs": args.jobs, "seconds": args.seconds, **result}))


if __name__ == "__main__":
    main()
