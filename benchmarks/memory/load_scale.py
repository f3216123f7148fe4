"""Loading weights at real scale: a Wan2.1-1.3B-shaped DiT from one bf16 safetensors file, through the placement pass.

The benchmark writes its own checkpoint (``--dir``, default /tmp/avatargen_load_scale): a plain stack of 30
transformer blocks of Wan2.1-T2V-1.3B's shape (dim 1536, FFN 8960, self- and cross-attention with q/k norms, adaLN
modulation; patch, text and time embeddings and the head), about 1.42 B parameters, 2.8 GB in bf16, written tensor by
tensor so the writer never holds the model either. Then, each in a fresh process, with the file in the page cache:

- ``raw``: the file's bytes read into one preallocated buffer (``readinto``): the floor of any load;
- ``plain``: ``safetensors.torch.load_file`` of the file, each tensor then cloned (safetensors maps the file lazily:
  the clone is what reads every byte into anonymous memory, tensor by tensor, as a plain load into memory does);
- ``none``: the model built on the meta device and placed with ``runtime.offload=none`` on the CPU in bf16;
- ``fsdp``: ``torchrun --nproc-per-node 2`` (gloo), each rank placing only its FSDP2 shards (``model`` here).

Memory is the process's anonymous resident memory (``RssAnon``: the checkpoint's pages, mapped from the page cache,
are file-backed and not counted), sampled every 2 ms by a thread, peak kept; ``VmHWM`` (which counts them) is shown
beside it. Targets (issue 11): none peak <= 1.1 x the model's bf16 bytes; each FSDP rank <= 0.6 x + 300 MB; none's
load time <= 1.3 x plain's. Usage::

    python benchmarks/memory/load_scale.py                 # ~3 minutes on the 2-core machine, 3 GB of /tmp, 6 GB RAM
    python benchmarks/memory/load_scale.py --blocks 4      # a smaller stack, same shapes per block
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
from torch import nn  # noqa: E402

DIM, FFN, HEADS, TEXT_DIM, FREQ_DIM, IN_DIM, OUT_DIM, PATCH = 1536, 8960, 12, 4096, 256, 16, 16, (1, 2, 2)


# -- the model: Wan2.1-1.3B's shapes, nothing else --------------------------------------------------------------------


class Attention(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))
        self.norm_q, self.norm_k = nn.RMSNorm(dim), nn.RMSNorm(dim)


class Block(nn.Module):
    def __init__(self, dim: int, ffn: int) -> None:
        super().__init__()
        self.self_attn = Attention(dim)
        self.norm3 = nn.LayerNorm(dim)
        self.cross_attn = Attention(dim)
        self.ffn = nn.Sequential(nn.Linear(dim, ffn), nn.GELU(approximate="tanh"), nn.Linear(ffn, dim))
        self.modulation = nn.Parameter(torch.zeros(1, 6, dim))


class WanShapedDiT(nn.Module):
    """The parameter layout of a Wan2.1-1.3B DiT (no forward: this benchmark measures loading)."""

    def __init__(self, blocks: int) -> None:
        super().__init__()
        self.patch_embedding = nn.Conv3d(IN_DIM, DIM, kernel_size=PATCH, stride=PATCH)
        self.text_embedding = nn.Sequential(nn.Linear(TEXT_DIM, DIM), nn.GELU(approximate="tanh"), nn.Linear(DIM, DIM))
        self.time_embedding = nn.Sequential(nn.Linear(FREQ_DIM, DIM), nn.SiLU(), nn.Linear(DIM, DIM))
        self.time_projection = nn.Sequential(nn.SiLU(), nn.Linear(DIM, DIM * 6))
        self.blocks = nn.ModuleList(Block(DIM, FFN) for _ in range(blocks))
        self.head = nn.Linear(DIM, OUT_DIM * PATCH[0] * PATCH[1] * PATCH[2])
        self.head_modulation = nn.Parameter(torch.zeros(1, 2, DIM))

    def block_stacks(self) -> list[nn.ModuleList]:
        return [self.blocks]


# -- the checkpoint, written tensor by tensor ------------------------------------------------------------------------


def write_checkpoint(path: Path, blocks: int) -> int:
    """A bf16 safetensors file of the model's state dict, streamed (safetensors: u64 header size, JSON, raw data)."""
    with torch.device("meta"):
        shapes = {k: tuple(v.shape) for k, v in WanShapedDiT(blocks).state_dict().items()}
    header, offset = {}, 0
    for name, shape in shapes.items():
        nbytes = 2 * int(torch.Size(shape).numel())
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    generator = torch.Generator().manual_seed(0)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name, shape in shapes.items():
            values = torch.empty(shape, dtype=torch.bfloat16).uniform_(-0.02, 0.02, generator=generator)
            f.write(values.view(torch.int16).numpy().tobytes())
    return offset


# -- measuring one load in this process -------------------------------------------------------------------------------


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return 0


class AnonPeak:
    """The peak of RssAnon, sampled every 2 ms on a thread (file-backed pages of the mapped checkpoint excluded)."""

    def __init__(self) -> None:
        self.peak_kb, self._stop = _status_kb("RssAnon"), threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_kb = max(self.peak_kb, _status_kb("RssAnon"))
            time.sleep(0.002)

    def __enter__(self) -> "AnonPeak":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_kb = max(self.peak_kb, _status_kb("RssAnon"))


def measure(mode: str, path: Path, blocks: int) -> dict:
    torch.set_num_threads(int(os.environ.get("LOAD_THREADS", "2")))
    from avatargen.runtime.offload import OffloadMonitor
    from avatargen.runtime.placement import PlacementPlan, build_on_meta, place
    from avatargen.runtime.tensor_source import SafetensorsSource

    base_kb = _status_kb("RssAnon")
    plan, rank = PlacementPlan("none", torch.device("cpu"), torch.bfloat16), 0
    if mode == "fsdp":
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh

        dist.init_process_group("gloo")
        rank = dist.get_rank()
        plan = PlacementPlan("fsdp", torch.device("cpu"), torch.bfloat16, mesh=init_device_mesh("cpu", (dist.get_world_size(),)))
        base_kb = _status_kb("RssAnon")
    started = time.perf_counter()
    with AnonPeak() as peak:
        if mode == "raw":
            buffer = torch.empty(path.stat().st_size, dtype=torch.uint8)
            view, done = memoryview(buffer.numpy()), 0
            with open(path, "rb", buffering=0) as f:
                while done < len(view):  # one read(2) returns at most ~2 GiB
                    done += f.readinto(view[done:])
            held = buffer.numel()
        elif mode == "plain":
            from safetensors.torch import load_file

            tensors = {k: v.clone() for k, v in load_file(str(path)).items()}  # mapped lazily: read every byte once
            held = sum(t.numel() * t.element_size() for t in tensors.values())
        else:
            from safetensors import safe_open

            with safe_open(str(path), "pt") as f:
                keys = list(f.keys())
            model = build_on_meta(lambda: WanShapedDiT(blocks))
            place(model, SafetensorsSource({k: (path, k) for k in keys}, str(path)), plan, OffloadMonitor("none", 2, plan.device), "dit")
            held = sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in model.parameters()) * 2
    seconds = time.perf_counter() - started
    return {"mode": mode, "rank": rank, "load_s": round(seconds, 3), "peak_anon_mb": round(peak.peak_kb / 1024, 1),
            "base_anon_mb": round(base_kb / 1024, 1), "vm_hwm_mb": round(_status_kb("VmHWM") / 1024, 1),
            "held_mb": round(held / 2**20, 1)}  # fmt: skip


# -- the driver ------------------------------------------------------------------------------------------------------


def run_child(mode: str, path: Path, blocks: int) -> list[dict]:
    results = path.parent / f"result_{mode}"  # one file per rank: two ranks printing to one pipe interleave their lines
    for old in path.parent.glob(f"{results.name}.*.json"):
        old.unlink()
    args = [str(Path(__file__).resolve()), "--child", mode, "--file", str(path), "--blocks", str(blocks), "--result", str(results)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if mode == "fsdp":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", *args]
    else:
        cmd = [sys.executable, *args]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if out.returncode != 0:
        raise SystemExit(f"{mode} failed:\n{out.stderr[-3000:]}")
    return [json.loads(f.read_text()) for f in sorted(path.parent.glob(f"{results.name}.*.json"))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/avatargen_load_scale"))
    parser.add_argument("--blocks", type=int, default=30)
    parser.add_argument("--child", choices=["raw", "plain", "none", "fsdp"])
    parser.add_argument("--file", type=Path)
    parser.add_argument("--result", type=Path, help="child: write the row to RESULT.<rank>.json")
    parser.add_argument("--keep", action="store_true", help="keep the checkpoint file afterwards")
    parser.add_argument("--repeat", type=int, default=3, help="load_s: the fastest of this many runs (raw, plain, none)")
    args = parser.parse_args()
    if args.child:
        row = measure(args.child, args.file, args.blocks)
        args.result.with_name(f"{args.result.name}.{row['rank']}.json").write_text(json.dumps(row))
        return
    args.dir.mkdir(parents=True, exist_ok=True)
    path = args.dir / f"wan_shaped_{args.blocks}.safetensors"
    started = time.perf_counter()
    model_bytes = write_checkpoint(path, args.blocks)
    model_mb = model_bytes / 2**20
    print(f"checkpoint: {path} ({model_mb:.0f} MiB bf16, {model_bytes // 2:,} parameters), written in {time.perf_counter() - started:.1f} s")
    with open(path, "rb") as f:  # into the page cache, so every mode reads it from memory
        while f.read(1 << 26):
            pass
    rows = [row for mode in ("raw", "plain", "none", "fsdp") for row in run_child(mode, path, args.blocks)]
    for _ in range(args.repeat - 1):  # the machine is shared: the fastest of a few fresh-process loads is the time
        for row in rows:
            if row["mode"] in ("raw", "plain", "none"):
                row["load_s"] = min(row["load_s"], run_child(row["mode"], path, args.blocks)[0]["load_s"])
    for row in rows:
        row["peak_over_model"] = round(row["peak_anon_mb"] / model_mb, 3)
        row["added_over_model"] = round((row["peak_anon_mb"] - row["base_anon_mb"]) / model_mb, 3)  # above the interpreter
        print(json.dumps(row))
    plain = next(r for r in rows if r["mode"] == "plain")
    raw = next(r for r in rows if r["mode"] == "raw")
    none = next(r for r in rows if r["mode"] == "none")
    ranks = [r for r in rows if r["mode"] == "fsdp"]
    summary = {
        "model_mb": round(model_mb, 1),
        "none_peak_over_model": none["peak_over_model"], "target_none": 1.1,
        "fsdp_rank_peak_mb": max(r["peak_anon_mb"] for r in ranks), "target_fsdp_mb": round(0.6 * model_mb + 300, 1),
        "none_time_over_plain": round(none["load_s"] / plain["load_s"], 3),
        "none_time_over_raw_read": round(none["load_s"] / raw["load_s"], 3), "target_time": 1.3,
    }  # fmt: skip
    print(json.dumps(summary))
    for result in args.dir.glob("result_*.json"):
        result.unlink()
    if not args.keep:
        path.unlink()


if __name__ == "__main__":
    main()
