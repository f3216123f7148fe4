"""InfiniteTalk at full size on a GPU, random weights (no download): `model=infinitetalk model.weights=random` at 480p
(640 x 640) for a few clips, once per offload policy, each in its own process.

Prints, per policy: seconds per sampling step (three DiT passes: text + audio guidance), peak device memory, peak
host RSS, time to first frame, and the whole render's wall time. Needs a CUDA device with room for the policy
(`none`: the 18.9 B-parameter DiT resident in bf16, 35.2 GiB, plus umT5 10.6 GiB, activations; `block`: the blocks
in flight and pinned host memory for the rest).

    python benchmarks/gpu/gpu_wan.py --policies none block --clips 2 --steps 4 --json-out out/gpu_wan.json
    python benchmarks/gpu/gpu_wan.py --model wan_tiny --device cpu --policies none   # the script itself, on a CPU

Each policy's render runs in a child process under ``--timeout-s``; a child that runs out of time is asked for every
thread's stack (SIGUSR1, faulthandler) before it is killed, and that stack is kept in its row of the JSON, which is
rewritten after every policy, so a run cut short still says how far each policy got and where it was. (The child
does not time its own dump: faulthandler's watchdog thread reads the other threads' frames as they change, and
once crashed a child it woke in the middle of its imports.)
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FPS = 25
STACKS_S = 1.0  # a child out of time has this long to print its stacks before it is killed


def run_one(model: str, device: str, policy: str, clips: int, steps: int, image: str) -> dict:
    """One render in this process; returns its measurements (called in a child process per policy)."""
    import numpy as np
    import soundfile as sf
    import torch

    from avatargen.config.loader import load_config
    from avatargen.families.wan.models.specs import family_spec
    from avatargen.render import RenderRequest, render

    spec = family_spec(model)
    frames = clips * (spec.clip_frames - spec.motion_frames)  # each clip adds clip_frames - motion_frames
    cuda = device == "cuda"
    with tempfile.TemporaryDirectory() as tmp:
        audio = Path(tmp) / "a.wav"
        t = np.arange(int(frames / FPS * 16000)) / 16000
        sf.write(audio, (0.3 * np.sin(2 * np.pi * 220 * t) * np.clip(np.sin(2 * np.pi * 4 * t), 0, None)).astype(np.float32), 16000)
        cfg = load_config([f"model={model}", "model.weights=random", f"runtime.device={device}",
                           f"runtime.offload={policy}", f"model.wan.sampling_steps={steps}"])  # fmt: skip
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        started = time.perf_counter()
        report = render(RenderRequest(Path(image), audio, Path(tmp) / "o.mp4"), cfg, warn=lambda _: None)
        wall = time.perf_counter() - started
    done = report["chunks"]
    # The a2v stage time covers every step of every clip (each step: three DiT passes with InfiniteTalk's guidance).
    return {
        "policy": policy, "clips": done, "steps": steps, "frames": report["frames"],
        "s_per_step": round(report["stage_s"]["a2v"] / (done * steps), 3),
        "peak_device_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None,
        "peak_rss_mb": report["peak_rss_mb"], "ttff_s": report["ttff_s"], "wall_s": round(wall, 2),
        "stage_s": report["stage_s"], "offload": report["offload"],
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="infinitetalk")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--policies", nargs="+", default=["none", "block"])
    parser.add_argument("--clips", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--image", default=str(REPO / "examples" / "avatar_1.png"))
    parser.add_argument("--json-out", default=None)
    parser.add_argument("--timeout-s", type=float, default=None, help="each policy's render at most this long")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        if args.timeout_s:  # the stacks of a render about to be cut short, when the parent asks: where its time went
            faulthandler.register(signal.SIGUSR1, all_threads=True)
        print(json.dumps(run_one(args.model, args.device, args.child, args.clips, args.steps, args.image)))
        return
    rows = []
    print(f"{'policy':>7} {'clips':>5} {'s/step':>7} {'device_GiB':>10} {'rss_MB':>8} {'ttff_s':>7} {'wall_s':>7}")
    for policy in args.policies:
        cmd = [sys.executable, __file__, "--child", policy, "--model", args.model, "--device", args.device,
               "--clips", str(args.clips), "--steps", str(args.steps), "--image", args.image]  # fmt: skip
        cmd += ["--timeout-s", str(args.timeout_s)] if args.timeout_s else []
        rows.append(run_child(policy, cmd, args.timeout_s))
        write_rows(rows, args.json_out)
    sys.exit(0 if all("error" not in r for r in rows) else 1)


def run_child(policy: str, cmd: list[str], timeout_s: float | None) -> dict:
    """One policy's row: its measurements, or its error (the end of its stderr: the stacks, when it timed out)."""
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        stdout, stderr = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        child.send_signal(signal.SIGUSR1)  # its stacks, then the kill
        time.sleep(STACKS_S)
        child.kill()
        stdout, stderr = child.communicate()
        print(f"{policy:>7} timed out after {timeout_s:.0f} s (its stacks are in the JSON row)", flush=True)
        heads = [at for at in (stderr.find("Thread 0x"), stderr.find("Current thread 0x")) if at >= 0]
        kept = stderr[min(heads):][:12000] if heads else stderr[-6000:]  # from the stacks' start, not a tail
        return {"policy": policy, "error": f"timed out after {timeout_s:.0f} s", "stderr": kept}
    if child.returncode != 0:
        print(f"{policy:>7} failed: {stderr.strip().splitlines()[-1] if stderr.strip() else child.returncode}")
        return {"policy": policy, "error": stderr[-2000:], "exit": child.returncode,
                "stdout": stdout[-2000:]}  # a child that failed: both ends of what it said
    row = json.loads(stdout.strip().splitlines()[-1])
    print(f"{policy:>7} {row['clips']:>5} {row['s_per_step']:>7.2f} {row['peak_device_gib'] or 0:>10.2f} "
          f"{row['peak_rss_mb']:>8.0f} {row['ttff_s']:>7.1f} {row['wall_s']:>7.1f}", flush=True)  # fmt: skip
    return row


def write_rows(rows: list[dict], path: str | None) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
