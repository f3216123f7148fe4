"""Render the bundled examples in float32 and in bfloat16 in one run: speed of each, and how far bf16 frames drift.

For each example (avatar_N.png + the first ``--seconds`` of speech_N.flac) the shipped model renders the same
frames once per dtype, in this process, at ``--threads`` threads, with one model set (warmed up in both dtypes). Printed per example and dtype: RTF and TTFF of the
pipeline (generation and decode; the MP4 encode is not included), then bf16 vs fp32: the RTF ratio (fp32 RTF / bf16
RTF, > 1: bf16 is faster; which dtype renders first alternates between examples), PSNR in dB and mean/max absolute difference in grey levels over all frames. The machine is
shared and noisy: compare the ratios of one run, not absolute figures across runs. The probe ``runtime.dtype=auto``
decides from is printed too.

    python benchmarks/speed/precision.py [--seconds 8] [--threads 2] [--keep-fp32 vae] [override ...]
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from avatargen.config.loader import load_config, to_config  # noqa: E402
from avatargen.config.schema import Config  # noqa: E402
from avatargen.io.audio import AudioFileSource  # noqa: E402
from avatargen.io.image import load_reference_image  # noqa: E402
from avatargen.families.tiny.build import build_modules
from tests.conftest import engine_of  # noqa: E402
from avatargen.pipeline.build import pipeline_for, resolve_device  # noqa: E402
from avatargen.pipeline.pipeline import Pipeline  # noqa: E402
from avatargen.runtime.precision import NATIVE_BF16_FLAGS, Precision, choose_precision, cpu_flags, probe_cpu_speedup  # noqa: E402


class Frames:
    """A sink that keeps every frame (T, H, W, 3) uint8."""

    def __init__(self) -> None:
        self.parts: list[np.ndarray] = []

    def write(self, frames: np.ndarray) -> None:
        self.parts.append(frames.copy())

    def video(self) -> np.ndarray:
        return np.concatenate(self.parts)  # (T, H, W, 3)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def render_once(pipeline: Pipeline, config: Config, dtype: torch.dtype, keep_fp32: list[str], image: Path,
                audio: Path) -> tuple[np.ndarray, float, float]:  # fmt: skip
    """(frames, RTF, TTFF s) of one pipeline render with every module computing in ``dtype`` (but ``keep_fp32``)."""
    models = pipeline.models
    for module in models.all():
        module.compute_dtype = torch.float32 if module.name in keep_fp32 else dtype
    reference = load_reference_image(image, config.model.image_size, config.pipeline.image_fit.value)
    block = max(1, int(config.pipeline.audio_block_s * config.model.sample_rate))
    source = AudioFileSource(audio, config.model.sample_rate, block_samples=block)
    sink = Frames()
    started = time.perf_counter()
    stats = pipeline.render(reference, source, [sink], "")
    wall = time.perf_counter() - started
    source.close()
    video = sink.video()
    return video, wall / (len(video) / config.model.fps), stats.ttff_s or float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=8.0, help="audio rendered per example")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--examples", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--keep-fp32", nargs="*", default=[], help="modules kept in float32 in the bf16 render (e.g. vae)")
    parser.add_argument("overrides", nargs="*", default=[])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = to_config(load_config(args.overrides))
    flags = cpu_flags()
    native = [f for f in NATIVE_BF16_FLAGS if f in flags] or ["none"]
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())  # fmt: skip
    print(f"# {date.today()} {cpu}, {args.threads} threads, native bf16 flags: {', '.join(native)}")
    print(f"# probe: bf16 {probe_cpu_speedup(torch.bfloat16):.2f}x fp32 (now) -> runtime.dtype=auto picks "
          f"{choose_precision('auto', resolve_device(config)).describe()}")  # fmt: skip
    print(f"# {args.seconds:g} s per example, bf16 keeps in fp32: {', '.join(args.keep_fp32) or 'nothing'}")
    print(f"{'example':>8} {'rtf_fp32':>9} {'rtf_bf16':>9} {'speedup':>8} {'ttff_fp32':>10} {'ttff_bf16':>10} "
          f"{'psnr_db':>8} {'mean_abs':>9} {'max_abs':>8}")  # fmt: skip
    # One model set for both dtypes (weights stay float32; the dtype is the modules' compute dtype), warmed up in
    # both before anything is timed: the first forwards of a process pay for kernel selection and allocation.
    pipeline = pipeline_for(config, build_modules(config, resolve_device(config), precision=Precision(torch.float32, "benchmark")), engine_of(config))
    walls = {torch.float32: 0.0, torch.bfloat16: 0.0}
    with tempfile.TemporaryDirectory() as tmp:
        wave, rate = sf.read(REPO / "examples" / "speech_1.flac", dtype="float32")
        warm = Path(tmp) / "warm.wav"
        sf.write(warm, wave[:rate], rate)
        for dtype in walls:
            render_once(pipeline, config, dtype, args.keep_fp32, REPO / "examples" / "avatar_1.png", warm)
        for n in args.examples:
            wave, rate = sf.read(REPO / "examples" / f"speech_{n}.flac", dtype="float32")
            audio = Path(tmp) / f"speech_{n}.wav"
            sf.write(audio, wave[: int(args.seconds * rate)], rate)
            image = REPO / "examples" / f"avatar_{n}.png"
            # Alternate which dtype goes first, so a load change on the shared machine does not favour one of them.
            runs = [(torch.float32, []), (torch.bfloat16, args.keep_fp32)]
            done = {dtype: render_once(pipeline, config, dtype, keep, image, audio) for dtype, keep in runs[:: 1 if n % 2 else -1]}
            (fp32, rtf32, ttff32), (bf16, rtf16, ttff16) = done[torch.float32], done[torch.bfloat16]
            diff = np.abs(fp32.astype(np.int16) - bf16.astype(np.int16))
            walls[torch.float32] += rtf32
            walls[torch.bfloat16] += rtf16
            print(f"{n:>8} {rtf32:>9.3f} {rtf16:>9.3f} {rtf32 / rtf16:>7.2f}x {ttff32:>10.3f} {ttff16:>10.3f} "
                  f"{psnr(fp32, bf16):>8.2f} {diff.mean():>9.3f} {diff.max():>8d}", flush=True)  # fmt: skip
    print(f"bf16 vs fp32 speed over all examples (sum of fp32 RTFs / sum of bf16 RTFs): "
          f"{walls[torch.float32] / walls[torch.bfloat16]:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
