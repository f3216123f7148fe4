"""``write_sheet``: what a reviewer would rather look at than read, as one PNG.

Top: a contact sheet of the reference image and chosen frames (the loudest moments, pauses, both sides of the
worst seam, the start, 10 s and 2 min in, the end). Below: three plots over time: mouth opening against loudness
(lip sync), identity distance to the reference with the same-person threshold, and frame change with the seams
marked. ``write_mouth_sheet`` draws the mouths of the loudest syllables, cropped and enlarged, where a tear or smear
of the generated mouth would show. Both need ``evaluate_video(..., curves=True)``'s result. The frames are decoded
again, only the chosen ones.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np

from avatargen.eval.video import analysis_size, probe_video
from avatargen.io.ffmpeg import ffmpeg_exe, local_file
from avatargen.io.image import load_reference_image
from avatargen.io.owned_names import fresh_file, pil_png_mark, png_mark

THUMB = 160
LATER_S = 120.0  # the "2 min" tile: how the face holds up over a long render
MOUTH_GROWTH = 1.6  # the mouth crop: the evaluator's mouth box grown by this on each side, so the jaw shows too
PEAK_SPACING_S = 0.2  # loudest frames at least this far apart: one frame per syllable, not ten of the same one


def choose_frames(result: dict) -> list[tuple[str, int]]:
    """(label, frame index) pairs for the contact sheet, in time order within each group."""
    n, fps = result["frames"], result["fps"]
    loud = np.asarray(result["curves"]["loudness"])
    ten = int(10 * fps)
    later = int(LATER_S * fps)
    picks: list[tuple[str, int]] = [("start", 0)] + ([("10 s", ten)] if n > 2 * ten else [])
    loudest = int(np.argmax(loud)) if n else 0
    for t in sorted(np.argsort(loud)[::-1][:: max(1, n // 40)][:3]):
        picks.append(("loudest" if int(t) == loudest else "loud", int(t)))
    quiet = np.flatnonzero(loud < 0.05 * max(loud.max(), 1e-9))
    for t in quiet[[len(quiet) // 3, 2 * len(quiet) // 3]] if len(quiet) >= 3 else []:
        picks.append(("pause", int(t)))
    seam = _worst_seam(result)
    if seam is not None:
        picks += [("before seam", max(0, seam - 1)), ("after seam", seam)]
    picks += [("2 min", later)] if n - 1 > later else []
    picks += ([("end - 10 s", n - 1 - ten)] if n > 2 * ten else []) + [("end", n - 1)]
    return picks


def loudest_frames(result: dict, count: int) -> list[int]:
    """The ``count`` loudest frames at least ``PEAK_SPACING_S`` apart (loudest first): one per loud syllable."""
    loud = np.asarray(result["curves"]["loudness"], float)
    spacing = max(1, int(round(PEAK_SPACING_S * result["fps"])))
    chosen: list[int] = []
    for t in np.argsort(loud)[::-1]:
        if len(chosen) == count or loud[t] <= 0:
            break
        if all(abs(int(t) - c) >= spacing for c in chosen):
            chosen.append(int(t))
    return chosen


def mouth_crop_box(result: dict) -> tuple[int, int, int, int] | None:
    """(x0, y0, x1, y1) in analysis pixels: the median mouth box of the video grown by ``MOUTH_GROWTH`` on each side
    (None: no face was found)."""
    if result.get("mouth_box") is None:
        return None
    x0, y0, x1, y1 = result["mouth_box"]
    width, height = result["analysed_at"]
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    half_w, half_h = MOUTH_GROWTH * (x1 - x0) / 2, MOUTH_GROWTH * (y1 - y0) / 2
    box = (int(max(0, cx - half_w)), int(max(0, cy - half_h)),
           int(min(width, cx + half_w)), int(min(height, cy + half_h)))  # fmt: skip
    return box if box[2] > box[0] and box[3] > box[1] else None


def write_mouth_sheet(path: Path, video: Path, result: dict, count: int = 10, zoom: int = 2) -> Path:
    """Draw the mouth region of the ``count`` loudest frames (``loudest_frames``), enlarged ``zoom`` times with
    nearest-neighbour pixels (nothing smoothed away), as one PNG row with the frame index and time under each crop.
    Raises ``BadInputError`` when no face was found (there is no mouth to crop)."""
    from PIL import Image, ImageDraw

    from avatargen.errors import BadInputError

    box = mouth_crop_box(result)
    if box is None:
        raise BadInputError(f"no face found in '{video}': no mouth to crop for the mouth sheet; check the video")
    indices = loudest_frames(result, count)
    frames = _decode(video, sorted(indices), long_side=max(result["analysed_at"]))
    x0, y0, x1, y1 = box
    crop_w, crop_h = (x1 - x0) * zoom, (y1 - y0) * zoom
    label_h, gap = 14, 4
    sheet = Image.new("RGB", (len(indices) * (crop_w + gap) + gap, crop_h + label_h + 2 * gap), "white")
    draw = ImageDraw.Draw(sheet)
    for i, t in enumerate(indices):
        if t not in frames:
            continue
        crop = Image.fromarray(frames[t][y0:y1, x0:x1]).resize((crop_w, crop_h), Image.Resampling.NEAREST)
        left = gap + i * (crop_w + gap)
        sheet.paste(crop, (left, gap))
        draw.text((left, gap + crop_h + 1), f"{t} ({t / result['fps']:.1f} s)", fill="black")
    with fresh_file(path) as file:
        sheet.save(file, format="PNG", pnginfo=pil_png_mark())
    return path


def write_sheet(path: Path, video: Path, result: dict, reference: Path | None = None) -> Path:
    """Draw the contact sheet and plots of ``video`` (evaluated as ``result``) to ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    picks = choose_frames(result)
    frames = _decode(video, sorted({t for _, t in picks}))
    tiles = [("reference", load_reference_image(reference, THUMB, fit="pad"))] if reference else []
    tiles += [(f"{label}\nframe {t}", frames[t]) for label, t in picks if t in frames]
    fps, curves = result["fps"], result["curves"]
    figure = plt.figure(figsize=(max(12, 1.3 * len(tiles)), 9), dpi=100)
    grid = figure.add_gridspec(4, len(tiles), height_ratios=[1.3, 1, 1, 1])
    for i, (label, image) in enumerate(tiles):
        axis = figure.add_subplot(grid[0, i])
        axis.imshow(image)
        axis.set_title(label, fontsize=8)
        axis.axis("off")
    time = np.arange(result["frames"]) / fps
    sync = figure.add_subplot(grid[1, :])
    mouth = np.array([np.nan if m is None else m for m in curves["mouth"]], float)
    loud = np.asarray(curves["loudness"])
    sync.plot(time, mouth / max(np.nanmax(mouth), 1e-9) if np.isfinite(mouth).any() else mouth, label="mouth opening")
    sync.plot(time, loud / max(loud.max(), 1e-9), label="loudness", alpha=0.7)
    offset = result["offset_frames"]
    verdict = f"offset {offset:+d} frames" if offset is not None else f"no offset: {result['sync_note']}"
    sync.set_title(f"lip sync: {verdict}", fontsize=9)
    sync.legend(fontsize=8, loc="upper right")
    identity = figure.add_subplot(grid[2, :], sharex=sync)
    if curves["identity"]:
        frames_at, distances = zip(*curves["identity"])
        identity.plot(np.asarray(frames_at) / fps, distances, marker=".", label="distance to the reference")
        identity.axhline(result.get("identity_threshold", 0.6), color="red", linestyle="--", label="same-person threshold")
        identity.legend(fontsize=8, loc="upper right")
    identity.set_title("identity (dlib ResNet distance; lower is closer)", fontsize=9)
    change = figure.add_subplot(grid[3, :], sharex=sync)
    change.plot(time, curves["change"], label="frame change (gray levels)")
    for s in result.get("seam_frames") or []:
        change.axvline(s / fps, color="red", alpha=0.4)
    for s in result.get("seams_known") or []:
        change.axvline(s / fps, color="green", alpha=0.2)
    found = f"stride {result['seam_period_frames']} frames (red)" if result.get("seams_found") else "no seam stride found"
    known = "; known seams green" if result.get("seams_known") else ""
    change.set_title(f"seams: {found}{known}", fontsize=9)
    change.set_xlabel("seconds")
    figure.tight_layout()
    with fresh_file(path) as file:
        figure.savefig(file, format="png", metadata=png_mark())
    plt.close(figure)
    return path


def _worst_seam(result: dict) -> int | None:
    """The seam whose frame changes most: of the seams the caller named (``--seams``, a render's ``--eval``) where
    there are any, else of those the blind search found (it can take a cartoon jaw's bursts for a stride)."""
    change = np.asarray(result["curves"]["change"])
    candidates = result.get("seams_known") or result.get("seam_frames") or []
    return int(max(candidates, key=lambda s: change[s])) if candidates else None


def _decode(video: Path, indices: list[int], long_side: int = THUMB) -> dict[int, np.ndarray]:
    """The frames at ``indices`` as (h, w, 3) uint8 images, ``long_side`` pixels on the long side (default: thumbnails;
    the analysis size gives the frames the evaluator measured, in its pixels)."""
    info = probe_video(video)
    width, height = analysis_size(info)
    scale = long_side / max(width, height)
    w, h = max(2, int(width * scale) // 2 * 2), max(2, int(height * scale) // 2 * 2)
    select = "+".join(f"eq(n\\,{i})" for i in indices)
    proc = subprocess.run(
        [ffmpeg_exe(), "-v", "error", "-i", local_file(video), "-map", "0:v:0", "-vf", f"select={select},scale={w}:{h}",
         "-fps_mode", "passthrough", "-f", "rawvideo", "-pix_fmt", "rgb24", "pipe:1"],
        stdin=subprocess.DEVNULL, capture_output=True, timeout=600,
    )  # fmt: skip
    data = np.frombuffer(proc.stdout, np.uint8)
    count = len(data) // (w * h * 3)
    frames = data[: count * w * h * 3].reshape(count, h, w, 3)
    return dict(zip(indices, frames))
