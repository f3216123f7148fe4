"""Peak memory of loading the largest reference image avatargen accepts (64 MP: an 8000x8000 PNG), 8- and 16-bit,
with ``image_fit=crop`` and ``face``; each load in a fresh process, its peak read from ``VmHWM``.

    python benchmarks/memory/image_memory.py [--side 8000]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

REPO = Path(__file__).resolve().parents[2]
MEASURE = """
import sys
sys.path.insert(0, {repo!r})
from avatargen.io.image import load_reference

def hwm_mb():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM")) / 1024

before = hwm_mb()
load_reference({path!r}, 256, {fit!r}, warn=lambda message: None)
print(before, hwm_mb())
"""


def write_images(folder: Path, side: int) -> dict[str, Path]:
    y, x = np.mgrid[0:side, 0:side]
    wide = folder / "16bit.png"
    Image.fromarray(((x * 7 + y * 3) % 65536).astype(np.uint16)).save(wide)
    rgb = folder / "8bit.png"
    Image.fromarray(np.stack([x % 256, y % 256, (x + y) % 256], axis=-1).astype(np.uint8)).save(rgb)
    return {"8-bit RGB": rgb, "16-bit grey": wide}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", type=int, default=8000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        images = write_images(Path(tmp), args.side)
        print(f"{args.side}x{args.side}: the RGB picture alone is {args.side * args.side * 3 / 2**20:.0f} MiB")
        print("| image | fit | peak before load (MiB) | peak after load (MiB) |")
        print("|---|---|---|---|")
        for name, path in images.items():
            for fit in ("crop", "face"):
                code = MEASURE.format(repo=str(REPO), path=str(path), fit=fit)
                before, after = map(float, subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                                          check=True).stdout.split())  # fmt: skip
                print(f"| {name} | {fit} | {before:.0f} | {after:.0f} |")


if __name__ == "__main__":
    main()
