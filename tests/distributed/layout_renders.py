"""Short ``model=wan_tiny`` renders (N and I chunks) under several parallel layouts, in one process per rank (and the
bundled model's, its A2V's tokens split):
``torchrun -m tests.distributed.layout_renders OUT LAYOUT...`` renders each LAYOUT in turn on every rank and rank 0
saves ``OUT/LAYOUT.npz``: the frames the sinks got, the latents every DiT sampling returned (fp32, before the VAE) and
the layout the render resolved. ``render_layout`` is the same render in the calling process (one rank: the
single-process reference).

The latents are read by wrapping the sampler's ``sample`` here, in test code: production code has no test hooks.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from avatargen.config.loader import load_config, to_config
from avatargen.families.tiny.stages.a2v import A2VStage
from avatargen.families.wan.stages.sampler import WanSamplerStage
from avatargen.io.image import load_reference
from avatargen.pipeline.build import pipeline_for, place_models
from avatargen.runtime.distributed import start_parallel

REPO = Path(__file__).resolve().parents[2]
SECONDS = 0.6  # wan_tiny: 15 frames, 2 clips and the seam between them; the bundled model: 2 chunks and a seam
# 80 x 80 frames: 5 x 5 tokens a latent frame, so a clip has 100 tokens and a seam window 125: neither divides by 3,
# and 125 does not divide by 2 (the padded and masked slices); 2 heads over 3 ranks are padded too.
WAN = ["model=wan_tiny", "model.image_size=80", "pipeline.interpolate=true", "runtime.threads=1"]
# the bundled model: its own square, float32 (float linear layers: int8 runs in one process only); 64 tokens a latent frame, 18 frames and the reference: 1,216 tokens
BUNDLED = ["pipeline.composite=false", "runtime.dtype=float32", "runtime.quantize=none", "runtime.threads=1"]
LAYOUTS: dict[str, list[str]] = {
    "single": WAN,
    "sequence": [*WAN, "runtime.sequence_parallel=auto", "runtime.guidance_parallel=false"],
    "guidance": [*WAN, "runtime.sequence_parallel=1", "runtime.guidance_parallel=true"],
    "guidance_x_sequence": [*WAN, "runtime.sequence_parallel=2", "runtime.guidance_parallel=true"],
    "bundled_single": BUNDLED,
    "bundled_sequence": [*BUNDLED, "runtime.sequence_parallel=2"],
}


def render_layout(layout: str) -> dict[str, np.ndarray | dict]:
    """The frames (T, H, W, 3) uint8, the DiT's latents (every sampling's, concatenated on time) and the resolved
    layout of one render of ``layout`` over this process's world."""
    torch.set_num_threads(1)
    config = to_config(load_config(LAYOUTS[layout]))
    parallel = start_parallel(config, torch.device("cpu"))
    square = load_reference(REPO / "examples" / "avatar_1.png", config.model.image_size, "crop").square
    wave, rate = sf.read(REPO / "examples" / "speech_1.flac", dtype="float32")
    latents: list[torch.Tensor] = []
    samplers = [(WanSamplerStage, "sample", WanSamplerStage.sample), (A2VStage, "generate", A2VStage.generate)]

    def recorded(original):
        def sample(self, *args, **kwargs):
            out = original(self, *args, **kwargs)
            latents.append(out.detach().clone())
            return out

        return sample

    frames: list[np.ndarray] = []
    for stage, name, original in samplers:
        setattr(stage, name, recorded(original))
    try:
        models = place_models(config, torch.device("cpu"), parallel)

        class Frames:
            def write(self, batch: np.ndarray) -> None:
                frames.extend(frame.copy() for frame in batch)

        pipeline_for(config, models, composited=False).render(square, [wave[: int(SECONDS * rate)]], [Frames()])
    finally:
        for stage, name, original in samplers:
            setattr(stage, name, original)
    return {"frames": np.stack(frames), "latents": torch.cat(latents, dim=2).numpy(),
            "layout": parallel.layout.report()}  # fmt: skip


def main(out: Path, layouts: list[str]) -> None:
    for layout in layouts:
        result = render_layout(layout)
        if torch.distributed.get_rank() == 0:
            np.savez(out / f"{layout}.npz", frames=result["frames"], latents=result["latents"],
                     layout=json.dumps(result["layout"]))  # fmt: skip


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
