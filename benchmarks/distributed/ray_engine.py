"""Bulk engines side by side (a benchmark, not CI): the same jobs through Ray workers, file-lock workers and a shell
loop of ``avatargen render``.

    python benchmarks/distributed/ray_engine.py [--jobs 12] [--seconds 4] [override ...]

The jobs: the bundled avatars and clips of the bundled speech, ``--seconds`` each, the bundled model. Four ways, one
after another on this machine, each in fresh processes, every render with ``runtime.threads=1``:

- ``ray, joined``: ``avatargen batch JOBS --out-dir DIR --ray --ray-address HEAD`` joining a Ray cluster already
  running on this machine (a head and 2 nodes of 1 CPU, raylets on 127.0.0.2), as a driver joins a real cluster:
  2 workers of 1 CPU;
- ``ray, local``: ``avatargen batch JOBS --out-dir DIR --ray``: the command starts a local Ray and stops it (its
  start-up and shutdown counted in);
- ``workers``: two ``avatargen batch JOBS --out-dir DIR`` processes (the file-lock workers);
- ``loop``: ``for job: avatargen render ...`` (one at a time, as a shell script would);
- ``loop x2``: the same loop split over two shells at once (``xargs -P 2``): the two cores busy, a model load a job.

Printed for each: wall seconds, jobs per minute, the render seconds of the jobs (what each job's own line or report
says), and the per-job overhead: (wall x parallel processes - render seconds) / jobs -- start-up, model loads,
scheduling. Throughput ratios are taken within one run (the machine is shared: seconds are noisy).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_DONE = re.compile(r": job \d+ ok: .* frames in ([\d.]+) s")


def make_jobs(folder: Path, count: int, seconds: float) -> Path:
    """``count`` jobs: avatar k % 3 with ``seconds`` of bundled speech cut at a different place each."""
    from imageio_ffmpeg import get_ffmpeg_exe

    rows = []
    for index in range(count):
        speech = REPO / "examples" / f"speech_{index % 3 + 1}.flac"
        clip = folder / f"clip{index}.wav"
        start = (index // 3) * 0.7
        subprocess.run([get_ffmpeg_exe(), "-v", "error", "-y", "-ss", f"{start}", "-t", f"{seconds}", "-i", str(speech),
                        "-ac", "1", "-ar", "16000", str(clip)], check=True)  # fmt: skip
        rows.append({"image": str(REPO / "examples" / f"avatar_{index % 3 + 1}.png"), "audio": clip.name,
                     "output": f"v{index}.mp4"})  # fmt: skip
    jobs = folder / "jobs.jsonl"
    jobs.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return jobs


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def batch(jobs: Path, out: Path, processes: int, extra: list[str], overrides: list[str]) -> tuple[float, float]:
    """``processes`` batch commands at once; (wall seconds, sum of the jobs' render seconds)."""
    command = [sys.executable, "-m", "avatargen", "batch", str(jobs), "--out-dir", str(out), *extra, *overrides,
               "runtime.threads=1"]  # fmt: skip
    started = time.perf_counter()
    running = [subprocess.Popen(command, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
               for _ in range(processes)]  # fmt: skip
    render_s = 0.0
    for process in running:
        _, stderr = process.communicate()
        if process.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed ({process.returncode}): {stderr[-2000:]}")
        render_s += sum(float(m.group(1)) for line in stderr.splitlines() if (m := _DONE.search(line)))
    return time.perf_counter() - started, render_s


def loop(jobs: Path, out: Path, shells: int, overrides: list[str]) -> tuple[float, float]:
    """``avatargen render`` once per job, from ``shells`` shell loops at once (xargs -P)."""
    out.mkdir()
    lines = []
    for row in map(json.loads, jobs.read_text().splitlines()):
        args = ["-i", row["image"], "-a", str(jobs.parent / row["audio"]), "-o", str(out / row["output"]), "--json",
                "--quiet", *overrides, "runtime.threads=1"]  # fmt: skip
        lines.append(shlex.join([sys.executable, "-m", "avatargen", "render", *args]))
    script = out / "commands.txt"
    script.write_text("\n".join(lines) + "\n")
    started = time.perf_counter()
    result = subprocess.run(["xargs", "-P", str(shells), "-I", "{}", "sh", "-c", "{}"], stdin=script.open(), env=_env(),
                            capture_output=True, text=True)  # fmt: skip
    wall = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"the loop failed: {result.stderr[-2000:]}")
    return wall, sum(json.loads(line)["wall_s"] for line in result.stdout.splitlines() if line.startswith("{"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=12)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("overrides", nargs="*", default=[])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        jobs = make_jobs(root, args.jobs, args.seconds)
        from ray.cluster_utils import Cluster

        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "node_ip_address": "127.0.0.2",
                                                                "include_dashboard": False})  # fmt: skip
        for _ in range(2):
            cluster.add_node(num_cpus=1, node_ip_address="127.0.0.2")
        cluster.wait_for_nodes()
        ways = {
            "ray, joined": (
                lambda: batch(jobs, root / "ray-joined", 1, ["--ray-address", cluster.address], args.overrides),
                2,
            ),
            "ray, local": (lambda: batch(jobs, root / "ray-local", 1, ["--ray"], args.overrides), 2),
            "workers": (lambda: batch(jobs, root / "workers", 2, [], args.overrides), 2),
            "loop": (lambda: loop(jobs, root / "loop", 1, args.overrides), 1),
            "loop x2": (lambda: loop(jobs, root / "loop2", 2, args.overrides), 2),
        }
        results = {}
        for name, (run, parallel) in ways.items():
            wall, render_s = run()
            if name == "ray, joined":
                cluster.shutdown()  # its raylets would take CPU from the others
            results[name] = wall
            print(json.dumps({"way": name, "jobs": args.jobs, "seconds": args.seconds, "wall_s": round(wall, 1),
                              "jobs_per_min": round(args.jobs / wall * 60, 2), "render_s": round(render_s, 1),
                              "overhead_per_job_s": round((wall * parallel - render_s) / args.jobs, 2)}), flush=True)  # fmt: skip
        ratio = lambda slow, fast: round(results[slow] / results[fast], 3)  # noqa: E731 - throughput of fast / slow
        print(json.dumps({"ray joined / workers": ratio("workers", "ray, joined"), "ray local / workers": ratio("workers", "ray, local"),
                          "workers / loop": ratio("loop", "workers"), "ray joined / loop": ratio("loop", "ray, joined"),
                          "ray local / loop": ratio("loop", "ray, local"), "workers / loop x2": ratio("loop x2", "workers"),
                          "ray joined / loop x2": ratio("loop x2", "ray, joined")}))  # fmt: skip


if __name__ == "__main__":
    main()
