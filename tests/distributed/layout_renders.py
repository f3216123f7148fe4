"""Short ``model=wan_tiny`` renders (N and I chunks) under several parallel layouts, in one process per rank (and the
bundled model's, its A2V's tokens split):
``torchrun -m tests.distributed.layout_renders OUT LAYOUT...`` renders each LAYOUT in turn on every rank and rank 0
saves ``OUT/LAYOUT.npz``: the frames the sinks got, the latents every DiT sampling returned (fp32, before the VAE) and
the layout the render resolved. ``render_layout`` is the same render in the calling process (one rank: the
single-process reference).

The ``conversation`` layouts dub a source video with two speakers (MultiTalk's routing): every rank opens the files
in ``OUT`` (``write_conversation``) through the production readers, as every rank of a ``torchrun`` render does.

The latents are read by wrapping the sampler's ``sample`` here, in test code: production code has no test hooks.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import soundfile as sf
import torch


from avatargen.config.loader import load_config, to_config
from avatargen.io.ffmpeg import ffmpeg_exe
from avatargen.families.tiny.stages.a2v import A2VStage
from avatargen.families.wan.stages.sampler import WanSamplerStage
from avatargen.io.image import load_reference
from tests.conftest import engine_of
from avatargen.pipeline.build import pipeline_for, place_models
from avatargen.render.inputs import open_audio, open_picture, render_inputs
from avatargen.runtime.distributed import start_parallel
from avatargen.pipeline.run import RenderRun

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
    "conversation_single": WAN,
    "conversation_sequence": [*WAN, "runtime.sequence_parallel=auto", "runtime.guidance_parallel=false"],
    "conversation_guidance": [*WAN, "runtime.sequence_parallel=1", "runtime.guidance_parallel=true"],
}
# a conversation: a 96 x 96 source video (the square bucket: 80 x 80 frames, 100 tokens a clip and 125 a seam window
# as above), its left and right halves the two speakers
SOURCE, SPEAKER_FILES = "source.mp4", ("left.wav", "right.wav")
BOXES = [(0.0, 0.0, 48.0, 96.0), (48.0, 0.0, 96.0, 96.0)]


def write_conversation(folder: Path) -> None:
    """The source video and the two speakers' files of the ``conversation`` layouts, into ``folder``."""
    subprocess.run([ffmpeg_exe(), "-v", "error", "-y", "-f", "lavfi", "-i", f"testsrc=size=96x96:rate=25:duration={SECONDS}",
                    "-c:v", "libx264", "-pix_fmt", "yuv420p", str(folder / SOURCE)], check=True)  # fmt: skip
    wave, rate = sf.read(REPO / "examples" / "speech_1.flac", dtype="float32")
    n = int(SECONDS * rate)
    sf.write(folder / SPEAKER_FILES[0], wave[:n], rate)
    sf.write(folder / SPEAKER_FILES[1], wave[n : 2 * n] * (np.arange(n) > n // 2), rate)  # the right one joins later


def render_layout(layout: str, folder: Path | None = None) -> dict[str, np.ndarray | dict]:
    """The frames (T, H, W, 3) uint8, the DiT's latents (every sampling's, concatenated on time) and the resolved
    layout of one render of ``layout`` over this process's world (``folder``: the conversation's files)."""
    torch.set_num_threads(1)
    config = to_config(load_config(LAYOUTS[layout]))
    parallel = start_parallel(config, torch.device("cpu"), engine_of(config).splittable_work(config))
    if layout.startswith("conversation"):
        assert folder is not None, "a conversation layout reads the files of write_conversation"
        speakers = [folder / name for name in SPEAKER_FILES]
        opened = open_picture(None, folder / SOURCE, config, engine_of(config), print)
        inputs = render_inputs(opened, speakers, "para", BOXES, config, print)
        reference, audio = opened.reference, open_audio(speakers, "para", config, 4000, print)
    else:
        reference = load_reference(REPO / "examples" / "avatar_1.png", config.model.image_size, "crop").square
        wave, rate = sf.read(REPO / "examples" / "speech_1.flac", dtype="float32")
        inputs, audio = None, [wave[: int(SECONDS * rate)]]
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
        models = place_models(config, engine_of(config), torch.device("cpu"), parallel)

        class Frames:
            def write(self, batch: np.ndarray) -> None:
                frames.extend(frame.copy() for frame in batch)

        pipeline_for(config, models, engine_of(config), composited=False).render(reference, audio, [Frames()], run=RenderRun(inputs=inputs))
    finally:
        for stage, name, original in samplers:
            setattr(stage, name, original)
        if inputs is not None:  # the source video's and the speakers' decoders
            inputs.video.close()
            audio.close()
    return {"frames": np.stack(frames), "latents": torch.cat(latents, dim=2).numpy(),
            "layout": parallel.layout.report()}  # fmt: skip


def main(out: Path, layouts: list[str]) -> None:
    for layout in layouts:
        result = render_layout(layout, out)
        if torch.distributed.get_rank() == 0:
            np.savez(out / f"{layout}.npz", frames=result["frames"], latents=result["latents"],
                     layout=json.dumps(result["layout"]))  # fmt: skip


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
