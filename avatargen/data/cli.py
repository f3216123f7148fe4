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
from avatargen.io.encoder import Encoder


def synth_main(out_dir: str | Path, count: int = 4, seconds: float = 5.0, seed: int = HELDOUT_SEEDS_START,
               size: int = 256, fps: int = 25, sample_rate: int = 16000) -> list[Path]:
    """Write ``count`` examples to ``out_dir``; example i uses identity seed ``seed + i`` and clip seed ``seed + i``.

    Per example NNNN: ``NNNN_ref.png`` (reference image), ``NNNN.wav`` (driving audio, 16-bit PCM),
    ``NNNN.mp4`` (the rendered video with that audio) and ``NNNN.json`` (ground truth: prompt, identity_seed,
    fps, frames, per-frame mouth_boxes [x0, y0, x1, y1) and openness). The default seed is in the held-out range
    (>= 1_000_000). Frames stream into the MP4 one by one, so memory does not grow with ``seconds``.
    Returns the MP4 paths.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for i in range(count):
        stem = out / f"{i:04d}"
        ident_seed = seed + i
        audio, poses, prompt = clip_plan(ident_seed, seed + i, seconds, sample_rate, fps)
        renderer = FaceRenderer(identity_from_seed(ident_seed), size)
        Image.fromarray(renderer.render(NEUTRAL)[0]).save(f"{stem}_ref.png")
        sf.write(f"{stem}.wav", audio, sample_rate, subtype="PCM_16")
        boxes = []
        with Encoder(f"{stem}.mp4", size, size, fps, f"{stem}.wav") as writer:
            for pose in poses:
                frame, box = renderer.render(pose)
                writer.write(frame[None])
                boxes.append([int(v) for v in box])
        truth = {
            "prompt": prompt, "identity_seed": ident_seed, "clip_seed": seed + i, "fps": fps,
            "sample_rate": sample_rate, "frames": len(poses), "size": size, "mouth_boxes": boxes,
            "openness": [round(float(p.mouth_open), 4) for p in poses],
        }
        Path(f"{stem}.json").write_text(json.dumps(truth))
        written.append(Path(f"{stem}.mp4"))
    return written
