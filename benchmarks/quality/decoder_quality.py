"""How well each checkpoint's VAE decoder reconstructs the mouth: L1 (grey levels) and PSNR inside the mouth box of
frames the generator draws, every checkpoint decoding the same latents (the first checkpoint's encoder's).

Two sets of frames, 64 each: identities of the training pool in random poses (``pool``), and identities drawn from the
first 1,001,000 seeds, nearly all held out (``any``; the held-out ones start at 1,000,000). The decoders see a still
past in their causal convs, as a streamed render's first frame does. Each checkpoint's architecture comes from its
model.yaml (``model.vae.decoder_widths``; a folder from before the key holds a decoder as wide as its encoder).

    python benchmarks/quality/decoder_quality.py --checkpoint OLD_FOLDER [--checkpoint FOLDER ...]   # + the shipped one
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch

from avatargen.config.loader import load_config, to_config
from avatargen.families.tiny.config import trained_vae_params
from avatargen.families.tiny.models.vae import VAE
from avatargen.families.tiny.config import SHIPPED_CHECKPOINTS
from avatargen.families.tiny.train.pixel_phases import FrameSampler, decode_with_past
from avatargen.families.tiny.train.recipe import load_module

FRAME_SETS = {"pool": (100_000, 999), "any": (1_001_000, 7)}  # name: (identity seeds below, sampler seed)


def load_vae(folder: Path) -> VAE:
    """The VAE of a checkpoint folder, built as its model.yaml says."""
    vae = VAE(trained_vae_params(folder, to_config(load_config([])).model.vae))
    load_module(vae, folder / "vae.safetensors")
    return vae.eval()


@torch.no_grad()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path, action="append", default=[], help="a checkpoint folder")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    folders = [*args.checkpoint, SHIPPED_CHECKPOINTS["tiny"]]
    size = to_config(load_config([])).model.image_size
    vaes = [load_vae(folder) for folder in folders]
    print("| checkpoint | decoder widths | frames | mouth L1 (grey levels) | mouth PSNR (dB) |\n|---|---|---|---|---|")
    for name, (identities, seed) in FRAME_SETS.items():
        sampler = FrameSampler(size, identities, seed)
        errors: list[list[tuple[float, float]]] = [[] for _ in vaes]
        for _ in range(4):
            images, boxes = sampler.batch(16)  # (16, 3, 256, 256), (16, 4) x0, y0, x1, y1
            latents = vaes[0].encode_distribution(images)[0]  # (16, C, 32, 32) raw posterior means
            for vae, found in zip(vaes, errors):
                video = decode_with_past(vae, latents, sudden=False)  # (16, 3, 256, 256)
                for frame, image, (x0, y0, x1, y1) in zip(video, images, boxes.tolist()):
                    difference = frame[:, y0:y1, x0:x1] - image[:, y0:y1, x0:x1]
                    found.append((difference.abs().mean().item(), difference.pow(2).mean().item()))
        for folder, vae, found in zip(folders, vaes, errors):
            l1 = sum(a for a, _ in found) / len(found) * 127.5
            psnr = 10 * math.log10(4 / (sum(b for _, b in found) / len(found)))
            print(f"| {folder} | {vae.params.decoder_levels} | {name} ({len(found)}) | {l1:.2f} | {psnr:.2f} |")


if __name__ == "__main__":
    main()
