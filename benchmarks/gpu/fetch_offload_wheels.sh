#!/usr/bin/env bash
# Wheels for benchmarks/gpu/gpu_checks.sh on the GPU machine, which reaches no package index. Run here, from anywhere:
#
#     bash benchmarks/gpu/fetch_offload_wheels.sh               # ~37 MB into benchmarks/gpu/wheels/ (git-ignored)
#     bash benchmarks/gpu/fetch_offload_wheels.sh --bench-only  # diffusers + accelerate and their missing deps (~6 MB)
#
# then copy the checkout with that folder to the GPU machine (see benchmarks/gpu/gpu_checks.sh). There,
#     pip install --no-index --find-links benchmarks/gpu/wheels diffusers accelerate
# installs them offline. The target is the GPU image: CPython 3.12 on x86-64 Linux, torch preinstalled.
#
# What that image already has (so is not fetched): torch, numpy, safetensors, huggingface-hub 1.33 (diffusers needs
# >= 1.32), filelock, regex, requests, Pillow, packaging, psutil, PyYAML, zipp, typer, rich, einops, pytest.
# What it lacks and is fetched:
#   for gpu_offload.py   diffusers (pure Python), accelerate (already there, same version: kept for a newer image),
#                        importlib-metadata + lazy-importer (diffusers' declared deps; not imported on Python 3.12)
#   for avatargen itself omegaconf, soundfile + cffi + pycparser, imageio-ffmpeg (its ffmpeg binary: 29.5 MB;
#                        0.8.x is 68 MB: the folder is kept under 64 MiB)
# Versions are pinned: the ones benchmarks/gpu/gpu_offload.py --smoke was run with. One version of each: pip refuses two.
set -euo pipefail
cd "$(dirname "$0")/../.."

bench=(diffusers==0.42.1 accelerate==1.15.0 importlib-metadata==10.2.0 lazy-importer==0.1.0)
runtime=(omegaconf==2.4.0 soundfile==0.14.0 cffi==2.1.1 pycparser==3.12 imageio-ffmpeg==0.7.0)
packages=("${bench[@]}")
[[ "${1:-}" == "--bench-only" ]] || packages+=("${runtime[@]}")

dest=benchmarks/gpu/wheels
rm -rf "$dest"
mkdir -p "$dest"
python3 -m pip download -q --no-deps --only-binary=:all: --dest "$dest" \
  --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  "${packages[@]}"
ls -1s --block-size=K "$dest"
du -sh "$dest"
