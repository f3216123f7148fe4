"""One video on several ranks (a benchmark, not CI): what sequence parallelism (Ulysses) buys, and what it costs.

    python benchmarks/distributed/sequence_parallel.py dit [--grid 4 32 32] [--ranks 2] [--shard] [--spec wan_1_3b]
        one Wan DiT forward at Wan2.1-1.3B's width and depth (dim 1536, 30 layers, 12 heads, ffn 8960; T2V, random
        weights) over a small latent grid (default 4 x 32 x 32: 1,024 tokens), one thread a rank: 1 rank (the
        single-process forward) against N ranks (torchrun, gloo or NCCL, the tokens split over them). Target on a
        2-core CPU, 2 ranks x 1 thread: wall-time ratio <= 0.6. --shard also FSDP-shards the weights over the ranks
        (the memory layout: every block all-gathered per forward) instead of whole weights on every rank; --spec
        wan_tiny --grid 5 10 6 checks the script itself in seconds.
    python benchmarks/distributed/sequence_parallel.py render [--seconds 4] [--ranks 2] [override ...]
        the whole `model=wan_tiny` render, 1 rank x 1 thread against N ranks x 1 thread (torchrun, the default layout
        or the one the overrides ask for, e.g. runtime.shard=none), with each stage's seconds
    python benchmarks/distributed/sequence_parallel.py one-rank-mesh [--device cuda] [--grid 21 60 104]
        the cost of the Ulysses path itself: the same DiT forward with its tokens whole and split over a 1-rank group
        (two all-to-alls a block that move nothing). Target: <= 2 % (benchmarks/gpu/gpu_checks.sh runs it on a GPU)
    python benchmarks/distributed/sequence_parallel.py bundled [--frames 18] [--ranks 2]
        the bundled model's DiTs: one A2V forward over a window of 18 frames (2 motion + 16; 64 tokens a frame and
        the reference's: 1,216 tokens), 1 rank x 1 thread against N ranks x 1 thread with its tokens split; and, for
        SR (a sequence per frame of 64 + 64 tokens, 16 frames a batch), its forward against what one all-to-all of
        its block's q, k, v costs on the same ranks (two a block would be its whole gain's price)
    python benchmarks/distributed/sequence_parallel.py flops [--grid 21 60 104] [--ranks 8]
        FLOPs of one DiT forward (InfiniteTalk-14B and Wan2.1-1.3B) and of the VAE decode of one clip, counted by
        torch's FlopCounterMode on the meta device, with what each of N sequence ranks computes and exchanges

Each prints one JSON object. Timing needs a quiet machine: every rank gets one core.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

SPEC = "wan_1_3b"  # Wan2.1-T2V-1.3B: dim 1536, ffn 8960, 12 heads, 30 layers


# -- one DiT forward ------------------------------------------------------------------------------------------------


def dit_forward(grid: list[int], device: str, split: str, shard: bool, repeats: int, dtype: str, spec: str) -> dict:
    """Time ``repeats`` forwards (after one warm-up) of the 1.3B DiT in this process, one rank of torchrun's world
    (or alone). ``split``: ``none`` (tokens whole), ``world`` (Ulysses over every rank), ``one`` (Ulysses over a
    1-rank group of this process alone)."""
    import torch
    import torch.distributed as dist

    from avatargen.families.wan.models.dit import WanDiT
    from avatargen.families.wan.models.params import dit_params
    from avatargen.runtime.offload import OffloadMonitor
    from avatargen.runtime.placement import PlacementPlan, RandomInit, build_on_meta, place
    from avatargen.runtime.sequence_parallel import apply_sequence_parallel

    if device == "cpu":
        torch.set_num_threads(1)
    run_dtype = getattr(torch, dtype)
    dev = torch.device(device, int(os.environ.get("LOCAL_RANK", 0))) if device == "cuda" else torch.device(device)
    if device == "cuda":
        torch.cuda.set_device(dev)
    joined = "WORLD_SIZE" in os.environ
    if joined:
        dist.init_process_group("nccl" if device == "cuda" else "gloo")
    params = dit_params(spec)
    model = build_on_meta(lambda: WanDiT(params))
    mesh = None
    if shard:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(device, (dist.get_world_size(),))
    plan = PlacementPlan("fsdp" if shard else "none", dev, run_dtype, mesh=mesh)
    place(model, RandomInit(0), plan, OffloadMonitor("none", 2, dev), "dit")
    if split == "world":
        apply_sequence_parallel(model, dist.group.WORLD)
    elif split == "one":
        apply_sequence_parallel(model, dist.new_group([dist.get_rank()]))
    g = torch.Generator().manual_seed(0)
    frames, height, width = grid
    latents = torch.randn(1, params.in_dim, frames, height, width, generator=g).to(dev)
    text = torch.randn(1, params.text_len, params.text_dim, generator=g).to(dev)
    clip = torch.randn(1, 257, params.clip_dim, generator=g).to(dev) if params.image_to_video else None
    t = torch.tensor([500.0], device=dev)

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()
        if joined:
            dist.barrier()

    times = []
    with torch.inference_mode():
        for _ in range(1 + repeats):
            sync()
            started = time.perf_counter()
            out = model(latents, t, text, clip)
            sync()
            times.append(time.perf_counter() - started)
    tokens = frames * (height // 2) * (width // 2)
    return {"tokens": tokens, "grid": grid, "seconds": round(min(times[1:]), 3), "warmup_s": round(times[0], 3),
            "checksum": float(out.double().abs().sum())}  # fmt: skip


def _torchrun(ranks: int, args: list[str], threads: int = 1) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": str(threads)}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks),
               "--local-ranks-filter", "0", __file__, *args]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, env=env)


def _last_json(text: str) -> dict:
    return json.loads([line for line in text.splitlines() if line.startswith("{")][-1])


def bench_dit(args: argparse.Namespace) -> dict:
    common = ["--grid", *map(str, args.grid), "--device", args.device, "--repeats", str(args.repeats),
              "--dtype", args.dtype, "--spec", args.spec]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    one = subprocess.run([sys.executable, __file__, "worker", "--split", "none", *common], capture_output=True,
                         text=True, env=env)  # fmt: skip
    if one.returncode:
        raise SystemExit(one.stderr[-3000:])
    many = _torchrun(args.ranks, ["worker", "--split", "world", *common, *(["--shard"] if args.shard else [])])
    if many.returncode:
        raise SystemExit(many.stderr[-3000:])
    single, split = _last_json(one.stdout), _last_json(many.stdout)
    return {"benchmark": f"one Wan DiT forward, {args.spec}", "device": args.device,
            "dtype": args.dtype, "tokens": single["tokens"], "grid": args.grid, "one_rank_s": single["seconds"],
            f"{args.ranks}_ranks_s": split["seconds"], "ratio": round(split["seconds"] / single["seconds"], 3),
            "weights": "fsdp over the ranks" if args.shard else "whole on every rank",
            "same_output": abs(split["checksum"] - single["checksum"]) <= 1e-6 * single["checksum"]}  # fmt: skip


# -- the bundled model's DiTs -----------------------------------------------------------------------------------------


def bundled_forward(frames: int, split: str, repeats: int) -> dict:
    """Time the shipped A2V (and SR) forwards in this process, one rank of torchrun's world or alone."""
    import torch
    import torch.distributed as dist

    from avatargen.config.loader import load_config, to_config
    from avatargen.families.tiny.models.a2v_dit import A2VDiT
    from avatargen.families.tiny.models.sr_dit import SRDiT
    from avatargen.runtime.sequence_parallel import apply_sequence_parallel

    torch.set_num_threads(1)
    joined = "WORLD_SIZE" in os.environ
    if joined:
        dist.init_process_group("gloo")
    model = to_config(load_config([])).model
    torch.manual_seed(0)
    a2v, sr = A2VDiT(model.a2v).eval(), SRDiT(model.sr).eval()
    if split == "world":
        apply_sequence_parallel(a2v, dist.group.WORLD)
    p = model.a2v
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, p.latent_channels, frames, p.latent_size, p.latent_size, generator=g)
    given = torch.zeros(1, frames, dtype=torch.bool)
    given[:, :2] = True
    inputs = (x, torch.tensor([0.5]), x, given, x[:, :, 0], torch.randn(1, frames, p.audio_dim, generator=g),
              torch.randn(1, p.text_dim, generator=g))  # fmt: skip
    low = torch.randn(16, model.sr.latent_channels, model.sr.low_size, model.sr.low_size, generator=g)
    high = torch.randn(16, model.sr.latent_channels, model.sr.high_size, model.sr.high_size, generator=g)

    def timed(call) -> float:
        times = []
        for _ in range(1 + repeats):
            if joined:
                dist.barrier()
            started = time.perf_counter()
            call()
            if joined:
                dist.barrier()
            times.append(time.perf_counter() - started)
        return round(min(times[1:]), 4)

    with torch.inference_mode():
        found = {"a2v_tokens": (frames + 1) * (p.latent_size // p.patch_size) ** 2, "a2v_s": timed(lambda: a2v(*inputs))}
        if not joined:
            found["sr_s"] = timed(lambda: sr(low, high))
        else:  # one block's q, k, v of SR's 16 sequences of 128 tokens, split over the ranks, exchanged once
            size = dist.get_world_size()
            message = torch.randn(3 * 16 * -(-128 // size) * model.sr.dim)  # divisible by the ranks
            received = torch.empty_like(message)
            found["sr_all_to_all_s"] = timed(lambda: dist.all_to_all_single(received, message))
    return found


def bench_bundled(args: argparse.Namespace) -> dict:
    common = ["--frames", str(args.frames), "--repeats", str(max(args.repeats, 5))]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    one = subprocess.run([sys.executable, __file__, "bundled-worker", "--split", "none", *common],
                         capture_output=True, text=True, env=env)  # fmt: skip
    if one.returncode:
        raise SystemExit(one.stderr[-3000:])
    many = _torchrun(args.ranks, ["bundled-worker", "--split", "world", *common])
    if many.returncode:
        raise SystemExit(many.stderr[-3000:])
    single, split = _last_json(one.stdout), _last_json(many.stdout)
    sr_blocks = 5  # 3 main + 2 face blocks, each two exchanges (q, k, v out; the output back)
    return {"benchmark": "the bundled model's DiTs", "a2v_tokens": single["a2v_tokens"], "a2v_one_rank_s": single["a2v_s"],
            f"a2v_{args.ranks}_ranks_s": split["a2v_s"], "a2v_ratio": round(split["a2v_s"] / single["a2v_s"], 3),
            "sr_one_rank_s": single["sr_s"], "sr_all_to_all_s": split["sr_all_to_all_s"],
            "sr_exchange_share": round(2 * sr_blocks * split["sr_all_to_all_s"] / single["sr_s"], 3)}  # fmt: skip


# -- the whole wan_tiny render --------------------------------------------------------------------------------------


def bench_render(args: argparse.Namespace) -> dict:
    from tests.conftest import write_face_png, write_speechlike_wav

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        image, audio = write_face_png(folder / "face.png"), write_speechlike_wav(folder / "a.wav", args.seconds)
        request = ["render", "-i", str(image), "-a", str(audio), "-q", "--json", "model=wan_tiny", "runtime.threads=1"]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        one = subprocess.run([sys.executable, "-m", "avatargen", *request, "-o", str(folder / "one.mp4")],
                             capture_output=True, text=True, env=env)  # fmt: skip
        if one.returncode:
            raise SystemExit(one.stderr[-3000:])
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(args.ranks),
                   "--local-ranks-filter", "0", "-m", "avatargen", *request, *args.overrides, "-o", str(folder / "many.mp4")]  # fmt: skip
        many = subprocess.run(command, capture_output=True, text=True, env={**env, "OMP_NUM_THREADS": "1"})
        if many.returncode:
            raise SystemExit(many.stderr[-3000:])
    single, split = _last_json(one.stdout), _last_json(many.stdout)
    keys = ("wall_s", "ttff_s")
    return {"benchmark": "model=wan_tiny render", "seconds": args.seconds, "layout": split["parallel"],
            **{f"one_rank_{k}": single[k] for k in keys}, **{f"{args.ranks}_ranks_{k}": split[k] for k in keys},
            "ratio": round(split["wall_s"] / single["wall_s"], 3),
            "one_rank_stage_s": single["stage_s"], f"{args.ranks}_ranks_stage_s": split["stage_s"]}  # fmt: skip


# -- the Ulysses path on one rank -----------------------------------------------------------------------------------


def bench_one_rank_mesh(args: argparse.Namespace) -> dict:
    common = ["--grid", *map(str, args.grid), "--device", args.device, "--repeats", str(args.repeats),
              "--dtype", args.dtype, "--spec", args.spec]  # fmt: skip
    results = {}
    for split in ("none", "one"):
        run = _torchrun(1, ["worker", "--split", split, *common], threads=1 if args.device == "cpu" else 4)
        if run.returncode:
            raise SystemExit(run.stderr[-3000:])
        results[split] = _last_json(run.stdout)
    ratio = results["one"]["seconds"] / results["none"]["seconds"]
    return {"benchmark": "the Ulysses path on a 1-rank group", "device": args.device, "dtype": args.dtype,
            "tokens": results["none"]["tokens"], "whole_s": results["none"]["seconds"],
            "one_rank_mesh_s": results["one"]["seconds"], "cost_percent": round(100 * (ratio - 1), 2),
            "target": "<= 2 %", "met": ratio <= 1.02}  # fmt: skip


# -- FLOPs ----------------------------------------------------------------------------------------------------------


def bench_flops(args: argparse.Namespace) -> dict:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from avatargen.families.wan.models.dit import WanDiT
    from avatargen.families.wan.models.params import dit_params, vae_params
    from avatargen.families.wan.models.vae import WanVAE

    frames, height, width = args.grid
    tokens = frames * (height // 2) * (width // 2)
    found = {"grid": args.grid, "tokens": tokens, "ranks": args.ranks}
    with torch.device("meta"):
        for name in ("infinitetalk", "wan_1_3b"):
            params = dit_params(name)
            model = WanDiT(params)
            latents = torch.zeros(1, params.in_dim, frames, height, width)
            text = torch.zeros(1, params.text_len, params.text_dim)
            clip = torch.zeros(1, 257, params.clip_dim) if params.image_to_video else None
            audio = None
            if params.audio is not None:
                a = params.audio
                audio = torch.zeros(1, 1 + a.vae_scale * (frames - 1), a.audio_window, a.layers, a.channels)
            with FlopCounterMode(display=False) as counter:
                model(latents, torch.zeros(1), text, clip, audio)
            total = counter.get_total_flops()
            # attention runs as batched matmuls on the meta device; self-attention: 4 L^2 dim a block
            self_attention = 4 * tokens**2 * params.dim * params.num_layers
            # what every sequence rank computes whole: the cross-attention keys and values of the text (and image)
            context = params.text_len + (257 if params.image_to_video else 0)
            replicated = 2 * 2 * context * params.dim**2 * params.num_layers
            per_rank_bytes = 4 * -(-tokens // args.ranks) * params.dim * 2 * params.num_layers  # bf16 q,k,v,o a block
            found[name] = {"tflop_per_forward": round(total / 1e12, 1),
                           "self_attention_share": round(self_attention / total, 3),
                           "replicated_share": round(replicated / total, 4),
                           "tflop_per_rank": round(((total - replicated) / args.ranks + replicated) / 1e12, 1),
                           "exchange_gb_per_rank_per_forward": round(per_rank_bytes * (args.ranks - 1) / args.ranks / 1e9, 2)}  # fmt: skip
        vae = WanVAE(vae_params("wan2_1"))
        z = torch.zeros(1, 16, 1, height, width)
        with FlopCounterMode(display=False) as first:
            _, stream = vae.decode(z)  # the first latent frame: one video frame
        with FlopCounterMode(display=False) as later:
            vae.decode(z, stream)  # each later one: four video frames
        total = first.get_total_flops() + (frames - 1) * later.get_total_flops()
        found["vae_decode_tflop_per_clip"] = round(total / 1e12, 1)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["dit", "render", "one-rank-mesh", "bundled", "flops", "worker", "bundled-worker"])
    parser.add_argument("--frames", type=int, default=18)
    parser.add_argument("--grid", type=int, nargs=3, default=None, help="latent frames, height, width")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--shard", action="store_true")
    parser.add_argument("--spec", default=SPEC, help="the DiT (a DIT_SPECS name; wan_tiny checks the script in seconds)")
    parser.add_argument("--split", default="none")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("overrides", nargs="*", help="render: config overrides of the N-rank render (its layout)")
    args = parser.parse_intermixed_args()
    if args.grid is None:
        args.grid = [21, 60, 104] if args.what == "flops" or args.device == "cuda" else [4, 32, 32]
    if args.what == "worker":
        result = dit_forward(args.grid, args.device, args.split, args.shard, args.repeats, args.dtype, args.spec)
        if int(os.environ.get("RANK", 0)) == 0:
            print(json.dumps(result), flush=True)
        return
    if args.what == "bundled-worker":
        result = bundled_forward(args.frames, args.split, args.repeats)
        if int(os.environ.get("RANK", 0)) == 0:
            print(json.dumps(result), flush=True)
        return
    bench = {"dit": bench_dit, "render": bench_render, "one-rank-mesh": bench_one_rank_mesh, "bundled": bench_bundled,
             "flops": bench_flops}  # fmt: skip
    print(json.dumps(bench[args.what](args)))


if __name__ == "__main__":
    main()
