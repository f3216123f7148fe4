"""Cost of the SR stage per frame: the whole latent frame against only the decoder's region (reference compositing
reads the mouth; ``SRDiT.forward``'s ``region``), and how far the region's latents move.

The shipped models, built as a render builds them (``KEY=VALUE`` overrides: e.g. ``runtime.dtype=float32
runtime.quantize=int8``; the DiT is the one a render's later segments run, int8 where the precision says so). The
low-resolution latents are the shipped VAE's encoding of ``--frames`` half-size frames of the example avatar shifted
a pixel per frame; the region is the one a render of each picture decodes (its compositor's read box and the
decoder's margin). SR runs as the stage does (batches of 4 frames), each variant ``--repeats`` times interleaved;
the median in ms per frame, the ratio to the whole frame, and the largest difference inside the region.

    python benchmarks/sr_region.py [--threads 1] [--frames 16] [--repeats 7] [KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from avatargen.config.loader import load_config, to_config  # noqa: E402
from avatargen.families.tiny.build import build_modules  # noqa: E402
from avatargen.families.tiny.chunks import TinyChunks  # noqa: E402
from avatargen.families.tiny.stages.decode import DecodeRegion  # noqa: E402
from avatargen.families.tiny.stages.sr import SRStage  # noqa: E402
from avatargen.io.image import load_reference  # noqa: E402
from avatargen.render import compositor_for  # noqa: E402

PICTURES = {"avatar_1": REPO / "examples" / "avatar_1.png"}


def astronaut(folder: Path) -> Path:
    from PIL import Image

    from tests.eval import clips

    path = folder / "astronaut.png"
    Image.fromarray(clips.astronaut()).save(path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (a render's SR thread has one)")
    parser.add_argument("--frames", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = to_config(load_config(args.overrides))
    models = build_modules(config, torch.device("cpu"))
    chunks = TinyChunks(config, models)
    stage = SRStage(models.fast("sr"), max_batch_frames=chunks.sr.max_batch_frames)
    import tempfile

    pictures = dict(PICTURES, astronaut=astronaut(Path(tempfile.mkdtemp())))
    size = config.model.image_size
    latent_size = config.model.sr.high_size
    print(f"# SR per frame, threads={args.threads}, {args.frames} frames, {models.precision.dtype}, "
          f"{models.precision.quantization.describe()}, overrides: {' '.join(args.overrides) or '-'}")  # fmt: skip
    print("| picture | region (latent px) | whole ms/frame | region ms/frame | ratio | max diff in region |")
    print("|---|---|---|---|---|---|")
    for name, path in pictures.items():
        loaded = load_reference(path, size, config.pipeline.image_fit.value)
        box = compositor_for(loaded, config).model_box()
        region = DecodeRegion.around(box, size // latent_size, latent_size)
        read = (region.top, region.bottom, region.left, region.right)
        reference = chunks.context.encode_reference(loaded.square, "")
        frames = np.stack([np.roll(loaded.square, shift, axis=1) for shift in range(args.frames)])  # (T, S, S, 3)
        images = torch.from_numpy(frames).permute(0, 3, 1, 2).float() / 127.5 - 1  # (T, 3, S, S)
        with torch.inference_mode(), models.vae.active() as vae:
            low = vae.encode(F.interpolate(images, scale_factor=0.5, mode="area"))  # (T, C, h, w)
        low = low.permute(1, 0, 2, 3)[None].float()  # (1, C, T, h, w)
        times: dict[str, list[float]] = {"whole": [], "region": []}
        outputs = {}
        for _ in range(args.repeats):
            for variant, asked in (("whole", None), ("region", read)):
                started = time.perf_counter()
                outputs[variant] = stage.upscale(reference, low, asked)
                times[variant].append((time.perf_counter() - started) * 1000 / args.frames)
        y0, y1, x0, x1 = read
        diff = (outputs["region"] - outputs["whole"])[..., y0:y1, x0:x1].abs().max().item()
        whole, part = statistics.median(times["whole"]), statistics.median(times["region"])
        print(f"| {name} | rows {y0}-{y1}, cols {x0}-{x1} of {latent_size} | {whole:.2f} | {part:.2f} | "
              f"{part / whole:.2f} | {diff:.2g} |")  # fmt: skip


if __name__ == "__main__":
    main()
