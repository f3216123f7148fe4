"""Why the MLPs use the exact (erf) GELU: its cost against DiT's tanh approximation, and what it changes in frames.

Prints (1) the kernel time of both on one A2V MLP activation (1088 tokens x 768), (2) one A2V forward (a 16-frame
window, the shipped sizes) with each (median of 5 interleaved best-of-3), and (3) the model frames (``pipeline.composite=false``) of a ``--seconds`` render
with the shipped weights (trained with the tanh form) computed both ways: mean / max difference and PSNR.

    python benchmarks/speed/gelu_choice.py [--threads 1] [--seconds 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
import torch.nn.functional as F

from avatargen.config.loader import load_config, to_config
from avatargen.io.audio import AudioFileSource
from avatargen.io.image import load_reference_image
from avatargen.families.tiny.models import layers
from avatargen.families.tiny.models.a2v_dit import A2VDiT, A2VDiTParams
from avatargen.families.tiny.build import build_modules
from avatargen.pipeline.family import engine_for
from avatargen.pipeline.build import pipeline_for
from avatargen.runtime.probe import best_time_s

REPO = Path(__file__).resolve().parent.parent


@contextmanager
def tanh_gelu():
    """The MLPs as DiT has them: tanh-approximated GELU."""
    original = layers.MLP.forward
    layers.MLP.forward = lambda self, x: self.fc2(F.gelu(self.fc1(x), approximate="tanh"))
    try:
        yield
    finally:
        layers.MLP.forward = original


def best_ms(run, repeats: int = 10) -> float:
    return best_time_s(run, repeats) * 1000


class Frames:
    def __init__(self) -> None:
        self.parts: list[np.ndarray] = []

    def write(self, frames: np.ndarray) -> None:
        self.parts.append(frames.copy())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with torch.inference_mode():
        x = torch.randn(1088, 768)
        print(f"GELU kernel, 1088 x 768: tanh {best_ms(lambda: F.gelu(x, approximate='tanh')):.2f} ms, "
              f"erf {best_ms(lambda: F.gelu(x)):.2f} ms")  # fmt: skip
        model, frames = A2VDiT(A2VDiTParams()).eval(), 16
        inputs = (torch.randn(1, 8, frames, 16, 16), torch.rand(1), torch.zeros(1, 8, frames, 16, 16),
                  torch.zeros(1, frames, dtype=torch.bool), torch.randn(1, 8, 16, 16), torch.randn(1, frames, 128),
                  torch.randn(1, 128))  # fmt: skip
        tanh_runs, erf_runs = [], []
        for _ in range(5):  # interleaved: a burst of load on a shared machine hits both alike
            with tanh_gelu():
                tanh_runs.append(best_ms(lambda: model(*inputs), 3))
            erf_runs.append(best_ms(lambda: model(*inputs), 3))
        tanh_ms, erf_ms = statistics.median(tanh_runs), statistics.median(erf_runs)
        print(f"A2V forward, 16-frame window: tanh {tanh_ms:.1f} ms, erf {erf_ms:.1f} ms ({erf_ms / tanh_ms:.2f}x)")

    wave, rate = sf.read(REPO / "examples" / "speech_1.flac", dtype="float32")
    config = to_config(load_config(["pipeline.composite=false"]))
    pipeline = pipeline_for(config, build_modules(config, torch.device("cpu")), engine_for(config))
    reference = load_reference_image(REPO / "examples" / "avatar_1.png", config.model.image_size, "face")
    with tempfile.TemporaryDirectory() as folder:
        audio = Path(folder) / "speech.wav"
        sf.write(audio, wave[: int(args.seconds * rate)], rate)

        def render() -> np.ndarray:
            sink, source = Frames(), AudioFileSource(audio, config.model.sample_rate)
            pipeline.render(reference, source, [sink])
            source.close()
            return np.concatenate(sink.parts).astype(np.float64)  # (T, S, S, 3)

        with tanh_gelu():
            tanh_frames = render()
        diff = np.abs(render() - tanh_frames)
    psnr = 10 * np.log10(255.0**2 / max(np.mean(diff**2), 1e-12))
    print(f"model frames, {args.seconds:g} s, erf vs tanh: mean {diff.mean():.4f}, max {diff.max():.0f} grey levels, "
          f"PSNR {psnr:.1f} dB")  # fmt: skip


if __name__ == "__main__":
    main()
