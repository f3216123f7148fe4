"""The model frames of short renders of every bundled example (the bundled family, the model's own square) and of
``model=wan_tiny`` with and without I chunks: a change to the engine or a family that is meant to keep the frames
must keep these. ``python -m tests.pipeline.golden_frames`` rewrites the golden file after a deliberate change.

Exact frames (an md5 per frame) are kept per kind of CPU (:func:`cpu_kind`: torch's kernel family, AVX2 or AVX-512,
with the vendor and AMX: float sums round differently with AVX2 and AVX-512 kernels, and MKL and oneDNN take other
paths on an AMD EPYC than on an AMX Xeon of the same family), for the runs recorded on one; on any CPU the frames must
also match small thumbnails within a few grey levels. Rewriting on one kind drops the other kinds' md5s of the runs
whose thumbnails moved (a deliberate change to those frames): rewrite there too to keep them exact.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from avatargen.config.loader import load_config, to_config
from avatargen.io.image import load_reference
from tests.conftest import engine_of
from avatargen.pipeline.build import pipeline_for, place_models
from avatargen.runtime.distributed import ParallelContext, world_info

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).with_name("golden") / "model_frames.json"
THUMBNAILS = Path(__file__).with_name("golden") / "model_frames.npz"
SECONDS = 1.5  # 38 frames: 3 N chunks + 2 I chunks of the bundled model; 4 clips of wan_tiny
THUMBNAIL = 8  # pixels a side

RUNS: dict[str, tuple[int, list[str]]] = {
    # the bundled family: the model's own square (no compositing), float32 with float linear layers, one thread,
    # 8-frame seams (the frames recorded on each CPU family were rendered so; the default is 4)
    **{f"tiny_avatar_{i}": (i, ["pipeline.composite=false", "runtime.dtype=float32", "runtime.quantize=none",
                                "pipeline.seam_frames=8"]) for i in (1, 2, 3)},  # fmt: skip
    "wan_tiny": (1, ["model=wan_tiny"]),  # N chunks only (the Wan default)
    "wan_tiny_interpolated": (1, ["model=wan_tiny", "pipeline.interpolate=true"]),  # N and I chunks
}


class _Frames:
    def __init__(self) -> None:
        self.frames: list[np.ndarray] = []

    def write(self, frames: np.ndarray) -> None:
        self.frames.extend(frame.copy() for frame in frames)


def render_frames(run: str) -> list[np.ndarray]:
    """The frames of golden run ``run``, one thread, as the engine hands them to the sinks: (H, W, 3) uint8 each."""
    example, overrides = RUNS[run]
    torch.set_num_threads(1)
    config = to_config(load_config([*overrides, "runtime.threads=1"]))
    image = REPO / "examples" / f"avatar_{example}.png"
    square = load_reference(image, config.model.image_size, config.pipeline.image_fit.value).square
    wave, rate = sf.read(REPO / "examples" / f"speech_{example}.flac", dtype="float32")
    assert rate == config.model.sample_rate
    models = place_models(config, engine_of(config), torch.device("cpu"), ParallelContext(world_info()))
    sink = _Frames()
    pipeline_for(config, models, engine_of(config), composited=False).render(square, [wave[: int(SECONDS * rate)]], [sink])
    return sink.frames


def md5s(frames: list[np.ndarray]) -> list[str]:
    return [hashlib.md5(np.ascontiguousarray(frame).tobytes()).hexdigest() for frame in frames]


def thumbnails(frames: list[np.ndarray]) -> np.ndarray:
    """(T, 8, 8, 3) float32: each frame's mean colour over an 8 x 8 grid of blocks."""
    video = np.stack(frames).astype(np.float32)  # (T, H, W, 3)
    t, h, w, c = video.shape
    return video.reshape(t, THUMBNAIL, h // THUMBNAIL, THUMBNAIL, w // THUMBNAIL, c).mean(axis=(2, 4))


def cpu_kind() -> str:
    """torch's CPU kernel family, the vendor and whether AMX is there: e.g. 'AVX512 AuthenticAMD', 'AVX512 GenuineIntel
    amx', 'AVX2 AuthenticAMD'."""
    vendor, flags = "unknown", set()
    cpuinfo = Path("/proc/cpuinfo")
    for line in cpuinfo.read_text().splitlines() if cpuinfo.exists() else []:
        key, _, value = line.partition(":")
        if key.strip() == "vendor_id":
            vendor = value.strip()
        elif key.strip() == "flags":
            flags = set(value.split())
            break
    return f"{torch.backends.cpu.get_cpu_capability()} {vendor}" + (" amx" if "amx_tile" in flags else "")


def main() -> None:
    golden = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    exact, thumbs = {}, {}
    for run in RUNS:
        frames = render_frames(run)
        exact[run], thumbs[run] = md5s(frames), thumbnails(frames)
        print(f"{run}: {len(frames)} frames")
    recorded = dict(np.load(THUMBNAILS)) if THUMBNAILS.exists() else {}
    moved = [run for run in RUNS if run not in recorded or np.abs(thumbs[run] - recorded[run]).max() > 0.5]
    for other in golden.values():  # another kind of CPU's md5s of frames that moved are stale: dropped
        for run in moved:
            other.pop(run, None)
    golden[cpu_kind()] = exact
    GOLDEN.write_text(json.dumps(golden, indent=1) + "\n")
    np.savez_compressed(THUMBNAILS, **thumbs)
    print(f"moved (other kinds of CPU's md5s dropped): {', '.join(moved) or 'none'}")


if __name__ == "__main__":
    main()
