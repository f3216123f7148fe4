"""``write_sheet``: what a reviewer would rather look at than read, as one PNG.

Top: a contact sheet of the reference image and chosen frames (the loudest moments, pauses, both sides of the
worst seam, the start and the end). Below: three plots over time: mouth opening against loudness (lip sync),
identity distance to the reference with the same-person threshold, and frame change with the seams marked.
Needs ``evaluate_video(..., curves=True)``'s result. The frames are decoded again, only the chosen ones.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np

from avatargen.eval.video import analysis_size, probe_video
from avatargen.io.ffmpeg import ffmpeg_exe, local_file
from avatargen.io.image import load_reference_image

THUMB = 160


def choose_frames(result: dict) -> list[tuple[str, int]]:
    """(label, frame index) pairs for the contact sheet, in time order within each group."""
    n, fps = result["frames"], result["fps"]
    loud = np.asarray(result["curves"]["loudness"])
    ten = int(10 * fps)
    picks: list[tuple[str, int]] = [("start", 0)] + ([("10 s", ten)] if n > 2 * ten else [])
    for t in sorted(np.argsort(loud)[::-1][:: max(1, n // 40)][:3]):
        picks.append(("loud", int(t)))
    quiet = np.flatnonzero(loud < 0.05 * max(loud.max(), 1e-9))
    for t in quiet[[len(quiet) // 3, 2 * len(quiet) // 3]] if len(quiet) >= 3 else []:
        picks.append(("pause", int(t)))
    seam = _worst_seam(result)
    if seam is not None:
        picks += [("before seam", max(0, seam - 1)), ("after seam", seam)]
    picks += ([("end - 10 s", n - 1 - ten)] if n > 2 * ten else []) + [("end", n - 1)]
    return picks


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
    figure.savefig(path)
    plt.close(figure)
    return path


def _worst_seam(result: dict) -> int | None:
    change = np.asarray(result["curves"]["change"])
    candidates = result.get("seam_frames") or result.get("seams_known") or []
    return int(max(candidates, key=lambda s: change[s])) if candidates else None


def _decode(video: Path, indices: list[int]) -> dict[int, np.ndarray]:
    """The frames at ``indices`` as (h, w, 3) uint8 thumbnails (THUMB on the long side)."""
    info = probe_video(video)
    width, height = analysis_size(info)
    scale = THUMB / max(width, height)
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
