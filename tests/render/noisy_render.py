"""A render whose models' outputs carry float noise: how far a change in the last bits of the numbers (another thread
count, kernel or CPU rounds a sum otherwise) moves the frames of the video (docs/equal-frames.md).

    python -m tests.render.noisy_render [--seconds 2] [--seeds 3] [KEY=VALUE ...]

prints, per noise seed, how many of the composited frames of ``examples/avatar_1.png`` with the start of
``examples/speech_1.flac`` moved, and by how many grey levels at most (one thread; the overrides on top of the default
config).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from avatargen.compose.composite import CompositingSink
from avatargen.config.loader import load_config, to_config
from avatargen.config.schema import Config
from avatargen.families.tiny.build import build_modules
from avatargen.io.audio import AudioFileSource
from avatargen.io.image import load_reference
from tests.conftest import engine_of
from avatargen.pipeline.build import pipeline_for
from avatargen.render import compositor_for
from tests.conftest import FrameList, REPO
from avatargen.pipeline.run import RenderRun

CPU = torch.device("cpu")
NOISE = 1e-6  # relative: about 8 float32 ulps


def composited_frames(config: Config, image: Path, audio: Path,
                      noise_seed: int | None = None) -> tuple[np.ndarray, int]:  # fmt: skip
    """The frames (T, H, W, 3) uint8 of a render of ``image`` with ``audio`` as ``avatargen render`` hands them to the
    encoder, with each output of the five models times (1 + NOISE x a seeded normal) where ``noise_seed`` is given;
    and how many model outputs were so perturbed."""
    loaded = load_reference(image, config.model.image_size, config.pipeline.image_fit.value, lambda line: None)
    compositor = compositor_for(loaded, config, warn=lambda line: None, speech=audio)
    models = build_modules(config, CPU)  # not the process's cached set: the hooks die with it
    perturbed = 0
    if noise_seed is not None:
        generator = torch.Generator().manual_seed(noise_seed)

        def perturb(module, inputs, output):
            nonlocal perturbed
            perturbed += 1
            return output * (1.0 + NOISE * torch.randn(output.shape, generator=generator))

        for module in models.all():
            module.model.register_forward_hook(perturb)
    sink = FrameList()
    pipeline = pipeline_for(config, models, engine_of(config), composited=True)
    with AudioFileSource(audio, config.model.sample_rate) as source:
        pipeline.render(loaded.square, source, [CompositingSink(compositor, [sink])], run=RenderRun(read_box=compositor.model_box()))
    return sink.video(), perturbed


def grey_moves(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(T,) the largest difference of each frame of two (T, H, W, 3) uint8 videos, in grey levels."""
    return np.abs(a.astype(np.int16) - b.astype(np.int16)).reshape(len(a), -1).max(axis=1)


def speech_start(folder: Path, seconds: float) -> Path:
    """The first ``seconds`` of the example speech, as a WAV in ``folder``."""
    wave, rate = sf.read(REPO / "examples" / "speech_1.flac", dtype="float32")
    path = folder / "speech.wav"
    sf.write(path, wave[: int(seconds * rate)], rate)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--image", type=Path, default=REPO / "examples" / "avatar_1.png")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = to_config(load_config([*args.overrides, "runtime.threads=1"]))
    with tempfile.TemporaryDirectory() as folder:
        audio = speech_start(Path(folder), args.seconds)
        exact, _ = composited_frames(config, args.image, audio)
        for seed in range(args.seeds):
            moved = grey_moves(exact, composited_frames(config, args.image, audio, seed)[0])
            print(f"noise seed {seed}: {int((moved > 0).sum())} of {len(moved)} frames moved, up to {int(moved.max())} "
                  f"grey levels ({int((moved > 2).sum())} by more than 2)")  # fmt: skip


if __name__ == "__main__":
    main()
