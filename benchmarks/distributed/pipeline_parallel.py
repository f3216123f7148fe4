"""A CPU proxy of timestep-forcing pipeline parallelism (avatargen/runtime/pipeline_parallel.py): the toy causal
4-step denoiser of tests/distributed/pipeline_toy.py on 1 rank against N ranks, one thread each (torchrun, gloo).

Prints, per run: the time to the first finished block (the pipeline's fill, its bubble), the steady-state interval
between finished blocks (median of the intervals after the first ``--warmup`` blocks) and its ratio to one process's.
Target (docs/distributed.md): with 2 ranks, a steady-state interval <= 0.65 of one process's (ideal 0.5: each rank
runs 2 of the 4 steps). The toy's width is chosen so that compute dominates the sends: dim 512, 256 tokens a block,
4 layers a step (about 1.1 GFLOP a step).

    python benchmarks/distributed/pipeline_parallel.py                     # 1 rank against 2, 24 blocks
    python benchmarks/distributed/pipeline_parallel.py --ranks 2 4 --blocks 32
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run(ranks: int, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks),
           "-m", "tests.distributed.pipeline_toy", "--blocks", str(args.blocks), "--steps", "4", "--dim", str(args.dim),
           "--tokens", str(args.tokens), "--layers", str(args.layers), "--no-compare"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=900)
    if out.returncode != 0:
        raise SystemExit(f"{ranks} ranks failed:\n{out.stderr[-3000:]}")
    report = json.loads(out.stdout.strip().splitlines()[-1])
    times = report["emitted_s"]
    intervals = [b - a for a, b in zip(times, times[1:])][args.warmup:]
    return {"ranks": ranks, "first_block_s": times[0], "interval_s": statistics.median(intervals),
            "total_s": times[-1], "blocks": len(times)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, nargs="+", default=[2])
    parser.add_argument("--blocks", type=int, default=24)
    parser.add_argument("--warmup", type=int, default=4, help="intervals left out of the steady state")
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2, help="1 rank and each N, interleaved, this many times")
    args = parser.parse_args()
    print(f"# {datetime.date.today()} {platform.node()} {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; toy dim "
          f"{args.dim}, {args.tokens} tokens, {args.layers} layers a step, 4 steps, {args.blocks} blocks, 1 thread a rank")  # fmt: skip
    rows: dict[int, list[dict]] = {}
    for _ in range(args.rounds):
        for ranks in [1, *args.ranks]:
            rows.setdefault(ranks, []).append(run(ranks, args))
    one = statistics.median(r["interval_s"] for r in rows[1])
    print(f"{'ranks':>5} {'first block s':>13} {'interval s':>10} {'vs 1 rank':>9} {'total s':>8}")
    summary = []
    for ranks, runs in rows.items():
        interval = statistics.median(r["interval_s"] for r in runs)
        first = statistics.median(r["first_block_s"] for r in runs)
        total = statistics.median(r["total_s"] for r in runs)
        print(f"{ranks:>5} {first:>13.3f} {interval:>10.4f} {interval / one:>9.3f} {total:>8.2f}")
        summary.append({"ranks": ranks, "first_block_s": round(first, 4), "interval_s": round(interval, 5),
                        "interval_vs_one": round(interval / one, 3), "total_s": round(total, 3)})  # fmt: skip
    two = next((s for s in summary if s["ranks"] == 2), None)
    if two:
        print(f"target: 2 ranks' steady-state interval <= 0.65 of one process's: {two['interval_vs_one']:.3f} "
              f"({'met' if two['interval_vs_one'] <= 0.65 else 'not met'})")
    print(json.dumps({"date": str(datetime.date.today()), "rows": summary}))


if __name__ == "__main__":
    main()
