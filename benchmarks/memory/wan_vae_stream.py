"""Peak RSS and seconds of decoding a long video with the Wan VAE: avatargen's streamed decode vs diffusers' decode.

Both decode the same latents with the same random weights (toy width: the memory story does not depend on it).
avatargen decodes ``--chunk`` latent frames per call with the causal past carried, and hands each chunk's frames
on as uint8 (here: counted and dropped, as the MP4 encoder would take them); diffusers' ``AutoencoderKLWan.decode``
takes the whole latent clip and returns the whole video. Each measurement runs in its own process (peak RSS is that
process's VmHWM).

    python benchmarks/memory/wan_vae_stream.py --seconds 10 120
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FPS = 25


def peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def measure(which: str, seconds: float, size: int, base_dim: int, chunk: int) -> dict:
    import torch

    sys.path.insert(0, str(ROOT))
    from avatargen.families.wan.models.params import vae_params
    from avatargen.families.wan.models.vae import WanVAE

    torch.set_num_threads(1)
    torch.manual_seed(0)
    vae = WanVAE(vae_params("wan_tiny", base_dim=base_dim)).eval()
    frames = int(seconds * FPS)
    latent_frames = 1 + (frames - 1) // 4
    latents = torch.randn(1, 16, latent_frames, size // 8, size // 8)
    if which == "diffusers":
        from diffusers import AutoencoderKLWan

        from tests.models.wan.diffusers_keys import vae_to_diffusers

        oracle = AutoencoderKLWan(base_dim=base_dim).eval()
        oracle.load_state_dict(vae_to_diffusers(vae.state_dict()))
        del vae
        mean = torch.tensor(oracle.config.latents_mean).view(1, -1, 1, 1, 1)
        std = torch.tensor(oracle.config.latents_std).view(1, -1, 1, 1, 1)
    baseline = peak_rss_mb()
    start = time.perf_counter()
    decoded = 0
    with torch.no_grad():
        if which == "ours":
            stream = None
            for first in range(0, latent_frames, chunk):
                video, stream = vae.decode(latents[:, :, first : first + chunk], stream)
                decoded += ((video + 1) * 127.5).round().to(torch.uint8).shape[2]
        else:
            video = oracle.decode(latents * std + mean, return_dict=False)[0]
            decoded = ((video + 1) * 127.5).round().to(torch.uint8).shape[2]
    return {
        "decoder": which,
        "video_s": seconds,
        "frames": decoded,
        "seconds": round(time.perf_counter() - start, 2),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "rss_before_decode_mb": round(baseline, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, nargs="+", default=[10.0, 120.0])
    parser.add_argument("--size", type=int, default=64, help="frame width and height in pixels")
    parser.add_argument("--base-dim", type=int, default=8, help="VAE base width (96 in Wan2.1)")
    parser.add_argument("--chunk", type=int, default=21, help="latent frames per streamed decode (81 video frames)")
    parser.add_argument("--one", nargs=2, metavar=("DECODER", "SECONDS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one[0], float(args.one[1]), args.size, args.base_dim, args.chunk)))
        return
    rows = []
    for seconds in args.seconds:
        for which in ("ours", "diffusers"):
            cmd = [sys.executable, __file__, "--one", which, str(seconds), "--size", str(args.size),
                   "--base-dim", str(args.base_dim), "--chunk", str(args.chunk)]  # fmt: skip
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            rows.append(json.loads(out.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), flush=True)
    print("\n| decoder | video_s | frames | seconds | peak_rss_mb |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['decoder']} | {r['video_s']:g} | {r['frames']} | {r['seconds']} | {r['peak_rss_mb']} |")


if __name__ == "__main__":
    main()
