"""Planted faults: does ``avatargen eval`` see what was done to a video, and say "not sure" when it should?

Videos: a render of the bundled avatar_1 speaking speech_1 by the shipped model (8 s, at the default crf and at
crf 0), a render of a photograph (skimage's astronaut, 4 s), and clips made from real photographs
(tests/eval/clips.py). Each row plants one fault and prints expected, measured and pass as a markdown table
(docs/eval.md). Renders run with runtime.threads=1; the whole script takes a few minutes on 2 CPU cores.

    python benchmarks/quality/eval_faults.py
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

import numpy as np
from PIL import Image

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from avatargen.eval import evaluate_video  # noqa: E402
from avatargen.io.audio import load_audio  # noqa: E402
from tests.eval import clips  # noqa: E402

EXAMPLES = REPO / "examples"
SR = clips.SR
HOP = clips.HOP


def render(image: Path, audio: Path, out: Path, *args: str) -> dict:
    cmd = [sys.executable, "-m", "avatargen", "render", "-i", str(image), "-a", str(audio), "-o", str(out),
           "--json", "--quiet", "runtime.threads=1", *args]  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if result.returncode != 0:
        sys.exit(f"render failed: {result.stderr.strip()}")
    report = json.loads(result.stdout)
    report["stderr"] = result.stderr.strip()
    return report


def num(value: float | None) -> str:
    return "null" if value is None else f"{value:.2f}"


def shifted(audio: np.ndarray, frames: int) -> np.ndarray:
    """The audio ``frames`` video frames later (> 0: delayed, silence first) or earlier (< 0)."""
    if frames >= 0:
        return np.concatenate([np.zeros(frames * HOP, np.float32), audio])
    return audio[-frames * HOP :]


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # no options: --help says what it does
    print(f"# {date.today()} eval planted faults, 2-core CPU\n")
    rows: list[tuple[str, str, str, bool]] = []

    def row(fault: str, expected: str, measured: str, ok: bool) -> None:
        rows.append((fault, expected, measured, ok))
        print(f"| {fault} | {expected} | {measured} | {'yes' if ok else '**no**'} |", flush=True)

    print("| planted fault | expected | measured | pass |\n|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        image, speech = EXAMPLES / "avatar_1.png", EXAMPLES / "speech_1.flac"
        base = tmp / "render.mp4"
        clean = render(image, speech, base, "--eval")  # render --eval: measured against the image, at the known seams
        wav = load_audio(speech, SR)
        row("none (render of avatar_1, speech_1)", "offset 0, same face",
            f"offset {clean['offset_frames']}, conf {clean['sync_confidence']:.2f} (chance best "
            f"{clean['sync_chance_max']:.2f}), identity {clean['identity_distance']:.2f}, face {clean['face_found']:.0%}",
            clean["offset_frames"] == 0 and clean["identity_distance"] < 0.6)  # fmt: skip
        for delay in (3, -3, 8, -8):
            path = clips.write_wav(tmp / f"delay{delay}.wav", shifted(wav, delay))
            r = evaluate_video(base, path)
            word = "delayed" if delay > 0 else "advanced"
            row(f"audio {word} {abs(delay)} frames", f"offset {-delay:+d}",
                f"offset {r['offset_frames']}, conf {r['sync_confidence']:.2f}; region opinion {r['sync_region_offset']}",
                r["offset_frames"] == -delay)
        still = tmp / "still.mp4"
        frame = np.asarray(Image.open(image).convert("RGB"))
        clips.write_mp4(still, np.repeat(frame[None], clean["frames"], axis=0))
        r = evaluate_video(still, speech)
        row("still image", "offset null", f"offset {r['offset_frames']} ({r['sync_note']})", r["offset_frames"] is None)
        r = evaluate_video(base, EXAMPLES / "speech_2.flac")
        row("swapped speech (speech_2)", "offset null",
            f"offset {r['offset_frames']} ({r['sync_note']}); region opinion {r['sync_region_offset']}",
            r["offset_frames"] is None)
        silent = clips.write_wav(tmp / "silence.wav", np.zeros_like(wav))
        r = evaluate_video(base, silent)
        row("silence", "offset null, says silent", f"offset {r['offset_frames']} ({r['sync_note']})",
            r["offset_frames"] is None and "silent" in (r["sync_note"] or ""))

        audio, openness = clips.speech(9.0)
        talk_wav = clips.write_wav(tmp / "talk.wav", audio)
        talk = clips.write_mp4(tmp / "talk.mp4", clips.talking_frames(openness))
        grace = clips.write_png(tmp / "grace.png", clips.grace_hopper())
        r = evaluate_video(talk, talk_wav, reference=grace)
        row("wrong reference (photo clip of the astronaut vs Grace Hopper)", "distance > 0.6",
            f"distance {num(r['identity_distance'])}", (r["identity_distance"] or 0) > 0.6)
        r = evaluate_video(base, speech, reference=EXAMPLES / "avatar_2.png")
        row("wrong reference (render of avatar_1 vs avatar_2.png)", "distance above the right reference's",
            f"distance {num(r['identity_distance'])} vs {clean['identity_distance']:.2f} (cartoons: see limits)",
            r["identity_distance"] is not None and r["identity_distance"] > clean["identity_distance"] + 0.05)
        cuts = clips.write_mp4(tmp / "cuts.mp4", clips.talking_frames(openness, jump_every=50), gop=25)
        r = evaluate_video(cuts, talk_wav)
        row("hard cuts every 2 s (photo clip, GOP 25), not told", "seam stride 50 frames",
            f"stride {r['seam_period_frames']}, excess {r['seam_excess']}, z {r['seam_z']}", r["seam_period_frames"] == 50)
        r = evaluate_video(talk, talk_wav)
        row("no cuts (same clip)", "no seam stride", f"found {r['seams_found']} (z {r['seam_z']})", not r["seams_found"])

        # The blended mouth: the warped one (the default) has a faint seam pattern of its own at crf 0 (next row)
        lossy, lossless = tmp / "blend_crf20.mp4", tmp / "blend_crf0.mp4"
        b20 = render(image, speech, lossy, "--eval", "pipeline.mouth=blend")
        b0 = render(image, speech, lossless, "--eval", "output.crf=0", "pipeline.mouth=blend")
        ratio = b20["seam_ratio"] / b0["seam_ratio"]
        row("keyframe-only change (crf 20 vs crf 0, same render, blended mouth)", "known-seam ratio within 10 %, no stride found",
            f"seam ratio {b20['seam_ratio']:.3f} vs {b0['seam_ratio']:.3f}; found {b20['seams_found']} / {b0['seams_found']}",
            abs(ratio - 1) <= 0.1 and not b20["seams_found"] and not b0["seams_found"])  # fmt: skip
        w0 = render(image, speech, tmp / "warp_crf0.mp4", "--eval", "output.crf=0")
        # A warped cartoon's jaw moves in bursts: the blind search can take the speech's rhythm for a stride; what must
        # not be found is the 16-frame chunk grid with a clear excess.
        row("the default (warped) render at crf 0", "no clear stride on the 16-frame chunk grid (excess < 1.5)",
            f"found {w0['seams_found']}, stride {w0['seam_period_frames']}, excess {w0['seam_excess']}; seam ratio {w0['seam_ratio']:.3f}",
            not w0["seams_found"] or w0["seam_period_frames"] % 16 != 0 or w0["seam_excess"] < 1.5)  # fmt: skip

        photo = clips.write_png(tmp / "astronaut.png", clips.astronaut())
        short = clips.write_wav(tmp / "speech4.wav", wav[: 4 * SR])
        # The model's own square (the default composites the photo's own face and scores it near the reference)
        photo_report = render(photo, short, tmp / "photo.mp4", "pipeline.composite=false")
        r = evaluate_video(tmp / "photo.mp4", short, reference=photo)
        warned = "looks like a photograph" in photo_report["stderr"]
        row("photo render (astronaut, bundled model)", "warned; distance > 0.6; sharpness < 0.3",
            f"warned {warned}; distance {num(r['identity_distance'])}; sharpness {num(r['sharpness'])}; "
            f"offset {r['offset_frames']}",
            warned and (r["identity_distance"] or 0) > 0.6 and (r["sharpness"] or 1) < 0.3)
    print(f"\n{sum(ok for *_, ok in rows)} of {len(rows)} rows pass")


if __name__ == "__main__":
    main()
