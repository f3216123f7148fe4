"""Speed of a default render per CPU class: RTF, time to first frame and seconds per stage of ``avatargen render ...
--json``, for each configuration, with the CPU flags that decide the class.

A configuration is a CPU class and optional config overrides (``--variant NAME=KEY=VALUE,KEY=VALUE``), or a source
tree (``--tree PATH``: that checkout's code, e.g. the main branch, against this one). The classes:

    native  this CPU as it is, defaults (runtime.dtype=auto: bf16 where the CPU has AMX and the probe finds it faster)
    avx512  AVX-512 (with VNNI) without AMX, emulated: torch's kernels, MKL and oneDNN capped at AVX-512; float32
    avx2    AVX2 + FMA only (most laptops and many cloud VMs), emulated: torch's kernels, MKL and oneDNN capped at
            AVX2; float32 (what ``auto`` picks on such a CPU)

The emulation runs the older instruction set's code paths on this CPU (same cores, caches and clock), through
ATEN_CPU_CAPABILITY, MKL_ENABLE_INSTRUCTIONS and ONEDNN_MAX_CPU_ISA; FBGEMM (int8) ignores them. A real AVX2 CPU
(a 2-core EPYC) was about 1.5x slower than the emulation (docs/performance.md, "Speed per CPU class").

Every run is a fresh ``python -m avatargen render -i IMAGE -a AUDIO -o OUT --json -q`` process, as a user starts
it. The configurations run one after the other within a round, rounds repeat (``--rounds``), so the machine's noise
hits them alike; each round starts one configuration later than the one before, so that no configuration always
runs in the same place of a round (use as many rounds as configurations, or a multiple). Each run's figures are
printed, then the median and range of each configuration.

    python benchmarks/speed/cpu_classes.py [--classes avx2 native] [--seconds 30] [--rounds 3] [--image PATH] [--eval]
                                     [--tree PATH ...] [--variant NAME=OVERRIDES ...] [KEY=VALUE ...]

``--seconds`` of speech: the example sentences repeated (benchmarks/speed/overlap_speed.py). ``process_rtf`` is the whole
process's wall time (Python, imports, models, encoder) over the audio's duration; ``rtf`` and ``ttff_s`` are the
render's own (from the start of the render, as ``--json`` reports them); ``cpu_s`` the CPU seconds of the process
and its children (ffmpeg's, a new picture's face search: the work done, less sensitive to other jobs on the machine
than wall time), ``sys_s`` the part of it in the kernel and ``faults_k`` their page faults in thousands (memory
faulted in afresh). ``--eval`` also
renders with ``--eval`` and prints its lip sync confidence, identity distance, sharpness and seam ratio (quality of
the same render, so a faster configuration is checked against the other's quality in one run).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks.speed.overlap_speed import speech  # noqa: E402

# (environment, config overrides) per CPU class.
CLASSES: dict[str, tuple[dict[str, str], list[str]]] = {
    "native": ({}, []),
    "avx512": ({"ATEN_CPU_CAPABILITY": "avx512", "MKL_ENABLE_INSTRUCTIONS": "AVX512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI",
               "FBGEMM_ENABLE_INSTRUCTIONS": "AVX512_E1"},
               ["runtime.dtype=float32"]),
    "avx2": ({"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2", "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2"},
             ["runtime.dtype=float32"]),
}  # fmt: skip
SHOWN_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8")
STAGES = ("a2v", "sr", "decode", "composite", "idle_motion", "publish", "context", "init")
QUALITY = ("sync_confidence", "identity_distance", "sharpness", "seam_ratio")  # of --eval


def cpu_flags() -> list[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return [flag for flag in SHOWN_FLAGS if flag in flags]


def capability(env: dict[str, str], tree: Path) -> str:
    """torch's CPU kernel family under ``env`` (what the emulation gives)."""
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    return subprocess.run([sys.executable, "-c", code], env=_environment(env, tree), capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip


def _environment(env: dict[str, str], tree: Path) -> dict[str, str]:
    merged = {**os.environ, **env}
    merged["PYTHONPATH"] = os.pathsep.join([str(tree), *filter(None, [os.environ.get("PYTHONPATH")])])
    return merged


def render(tree: Path, env: dict[str, str], image: Path, audio: Path, out: Path, overrides: list[str]) -> dict:
    command = [sys.executable, "-m", "avatargen", "render", "-i", str(image), "-a", str(audio), "-o", str(out), "--json",
               "-q", *overrides]  # fmt: skip
    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    result = subprocess.run(command, env=_environment(env, tree), cwd=tree, capture_output=True, text=True)
    process_s, after = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"render failed ({' '.join(command)}):\n{result.stderr[-2000:]}")
    report = json.loads(result.stdout)
    report["process_s"] = process_s
    report["cpu_s"] = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    report["sys_s"] = after.ru_stime - before.ru_stime
    report["faults_k"] = (after.ru_minflt - before.ru_minflt) / 1000
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--classes", nargs="+", default=["avx2", "native"], choices=list(CLASSES))
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--image", type=Path, default=REPO / "examples" / "avatar_1.png")
    parser.add_argument("--tree", type=Path, action="append", default=[], help="a checkout to compare (default: this one)")
    parser.add_argument("--variant", action="append", default=[], help="NAME=KEY=VALUE,KEY=VALUE: overrides compared")
    parser.add_argument("--eval", action="store_true", help="also print the render's quality (avatargen render --eval)")
    parser.add_argument("overrides", nargs="*", default=[], help="config overrides for every run")
    args = parser.parse_args()
    trees = [tree.resolve() for tree in args.tree] or [REPO]
    variants = [("", [])] + [(v.split("=", 1)[0], v.split("=", 1)[1].split(",")) for v in args.variant]

    configs = []  # (label, tree, env, overrides)
    for tree in trees:
        for name in args.classes:
            env, class_overrides = CLASSES[name]
            for variant, variant_overrides in variants:
                label = " ".join(filter(None, [name, variant, tree.name if len(trees) > 1 else ""]))
                configs.append((label, tree, env, [*class_overrides, *args.overrides, *variant_overrides]))

    print(f"# {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()}, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(f"# CPU flags: {' '.join(cpu_flags())}")
    for name in args.classes:
        print(f"# class {name}: torch kernels {capability(CLASSES[name][0], trees[0])}, env "
              f"{' '.join(f'{k}={v}' for k, v in CLASSES[name][0].items()) or '-'}")  # fmt: skip
    print(f"# {args.seconds:g} s of speech on {args.image.name}, {args.rounds} rounds\n")
    quality = QUALITY if args.eval else ()
    header = ["config", "rtf", "ttff_s", "process_rtf", "cpu_s", "sys_s", "faults_k", *STAGES, *quality]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    results: dict[str, list[dict]] = {label: [] for label, *_ in configs}
    with tempfile.TemporaryDirectory() as tmp:
        audio = speech(args.seconds, Path(tmp) / "speech.wav")
        for round_ in range(args.rounds):
            shift = round_ % len(configs)
            for label, tree, env, overrides in configs[shift:] + configs[:shift]:
                extra = ["--eval"] if args.eval else []
                report = render(tree, env, args.image, audio, Path(tmp) / "out.mp4", [*extra, *overrides])
                report["process_rtf"] = report["process_s"] / args.seconds
                results[label].append(report)
                stages = report.get("stage_s", {})
                cells = [f"{report['rtf']:.3f}", f"{report['ttff_s']:.2f}", f"{report['process_rtf']:.3f}", f"{report['cpu_s']:.1f}",
                         f"{report['sys_s']:.2f}", f"{report['faults_k']:.0f}",
                         *(f"{stages.get(s, 0.0):.2f}" for s in STAGES), *(f"{report.get(q, float('nan')):.3f}" for q in quality)]  # fmt: skip
                print(f"| {label} | " + " | ".join(cells) + " |", flush=True)
    print("\nmedian (min-max) over the rounds:\n")
    print("| config | rtf | ttff_s | process_rtf | cpu_s | sys_s | faults_k | a2v | sr | decode | dtype |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for label, reports in results.items():

        def cell(values: list[float], digits: int) -> str:
            return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"

        stages = [cell([r.get("stage_s", {}).get(s, 0.0) for r in reports], 2) for s in ("a2v", "sr", "decode")]
        print(f"| {label} | {cell([r['rtf'] for r in reports], 3)} | {cell([r['ttff_s'] for r in reports], 2)} | "
              f"{cell([r['process_rtf'] for r in reports], 3)} | {cell([r['cpu_s'] for r in reports], 1)} | "
              f"{cell([r['sys_s'] for r in reports], 2)} | {cell([r['faults_k'] for r in reports], 0)} | "
              f"{' | '.join(stages)} | {reports[0]['dtype']} |")  # fmt: skip


if __name__ == "__main__":
    main()
