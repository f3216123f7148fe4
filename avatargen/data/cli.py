"""Write synthetic talking-avatar examples to a folder (wired as ``avatargen synth`` by the main CLI)."""

from __future__ import annotations

import json
from pathlib import Path

import soundfile as sf
from PIL import Image

from avatargen.data.examples import HELDOUT_SEEDS_START, clip_plan
from avatargen.data.identity import identity_from_seed
from avatargen.data.pose import NEUTRAL
from avatargen.data.render import FaceRenderer
from avatargen.errors import BadInputError
from avatargen.io.encoder import Encoder
from avatargen.io.owned_names import MP4_TAG, check_owned_names, fresh_file, pil_png_mark, write_text_atomic


def example_names(out: Path, count: int) -> list[tuple[Path, str]]:
    """The names ``synth_main`` writes in ``out`` for ``count`` examples, each with its kind
    (``avatargen.io.owned_names.foreign_reason``)."""
    names = []
    for i in range(count):
        stem = f"{i:04d}"
        names += [(out / f"{stem}_ref.png", "png"), (out / f"{stem}.wav", "wav"), (out / f"{stem}.mp4", "mp4"),
                  (out / f"{stem}.partial.mp4", "partial"), (out / f"{stem}.json", "json")]  # fmt: skip
    return names


def synth_main(out_dir: str | Path, count: int = 4, seconds: float = 5.0, seed: int = HELDOUT_SEEDS_START,
               size: int = 256, fps: int = 25, sample_rate: int = 16000, overwrite: bool = False) -> list[Path]:
    """Write ``count`` examples to ``out_dir``; example i uses identity seed ``seed + i`` and clip seed ``seed + i``.

    Per example NNNN: ``NNNN_ref.png`` (reference image), ``NNNN.wav`` (driving audio, 16-bit PCM),
    ``NNNN.mp4`` (the rendered video with that audio) and ``NNNN.json`` (ground truth: prompt, identity_seed,
    fps, frames, per-frame mouth_boxes [x0, y0, x1, y1) and openness). The default seed is in the held-out range
    (>= 1_000_000). Frames stream into the MP4 one by one, so memory does not grow with ``seconds``.
    Each file carries avatargen's mark; a file at one of those names without it, or a link, is refused before
    anything is written (``BadInputError``), unless ``overwrite`` (a link is then replaced, never written through).
    Returns the MP4 paths.
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise BadInputError(f"--out '{out}' is a file; give a folder for the examples")
    check_owned_names(example_names(out, count), overwrite, writer="synth")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for i in range(count):
        stem = out / f"{i:04d}"
        ident_seed = seed + i
        audio, poses, prompt = clip_plan(ident_seed, seed + i, seconds, sample_rate, fps)
        renderer = FaceRenderer(identity_from_seed(ident_seed), size)
        with fresh_file(Path(f"{stem}_ref.png")) as file:
            Image.fromarray(renderer.render(NEUTRAL)[0]).save(file, format="PNG", pnginfo=pil_png_mark())
        with fresh_file(Path(f"{stem}.wav")) as file, \
                sf.SoundFile(file, "w", sample_rate, 1, "PCM_16", format="WAV") as wav:  # fmt: skip
            wav.software = MP4_TAG
            wav.write(audio)
        boxes = []
        with Encoder(f"{stem}.mp4", size, size, fps, f"{stem}.wav") as writer:
            for pose in poses:
                frame, box = renderer.render(pose)
                writer.write(frame[None])
                boxes.append([int(v) for v in box])
        truth = {
            "made_by": "avatargen synth", "prompt": prompt, "identity_seed": ident_seed, "clip_seed": seed + i,
            "fps": fps, "sample_rate": sample_rate, "frames": len(poses), "size": size, "mouth_boxes": boxes,
            "openness": [round(float(p.mouth_open), 4) for p in poses],
        }
        write_text_atomic(Path(f"{stem}.json"), json.dumps(truth))
        written.append(Path(f"{stem}.mp4"))
    return written
