"""``evaluate_video``: every quality metric of a talking-head video, in one streaming pass over its frames.

Works on any MP4 (or anything ffmpeg decodes), ours or another model's: no landmarks, no face detector, no model.
Each frame is decoded at 64x64 (see ``video.py``) and reduced at once to what the metrics keep: 64 cell means (lip
sync), one similarity (identity), one change (seams), one second difference (flicker). Memory is O(frames x 70
floats), about 2 MB for 5 minutes at 25 fps.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from PIL import Image

from avatargen.errors import BadInputError
from avatargen.eval.flicker import measure_flicker, second_difference
from avatargen.eval.identity import DEFAULT_FACE_BOX, IdentityTracker, summarize_identity
from avatargen.eval.lipsync import audio_envelope, frame_cells, measure_lipsync
from avatargen.eval.seams import frame_change, measure_seams
from avatargen.eval.video import ANALYSIS_SIZE, VideoInfo, iter_frames, probe_video
from avatargen.io.audio import load_audio
from avatargen.io.image import load_reference_image

AUDIO_SAMPLE_RATE = 16000  # enough for a loudness envelope, and what the audio encoder uses


def evaluate_video(
    video: Path,
    audio: Path,
    reference: Path | None = None,
    seams: list[int] | None = None,
    fps: float | None = None,
    *,
    face_box: tuple[float, float, float, float] = DEFAULT_FACE_BOX,
) -> dict:
    """Measure lip sync, identity drift, seam continuity and flicker of ``video`` driven by ``audio``.

    ``reference``: the image the video should keep looking like (default: the video's first frame);
    ``seams``: frame indices where chunks meet (a seam at s: frames s - 1 and s come from different chunks);
    ``fps``: overrides the rate ffmpeg reports; ``face_box``: the identity region, fractions (x0, y0, x1, y1).

    Returns a JSON-able dict: ``frames``, ``fps``, ``width``, ``height``, ``duration_s``; lip sync
    (``offset_frames``: positive = video lags audio, ``sync_confidence``, ``sync_peak``, ``sync_curve``,
    ``sync_max_lag``, ``mouth_box``; see ``lipsync.py``); identity (``identity_ratio`` end/start, ``identity_start``,
    ``identity_end``, ``identity_window_frames``, ``identity_reference``: "image" or "first_frame"); seams
    (``seam_ratio``, ``seam_ratios``, ``seam_change_median``, or ``seam_ratio`` None without seams); flicker
    (``flicker``, ``flicker_p95``, gray levels); ``eval_s``: seconds this took.
    Raises ``BadInputError`` (one line) for a missing or undecodable video, audio or reference, or a bad seam/fps.
    """
    started = time.perf_counter()
    video, audio = Path(video), Path(audio)
    info = probe_video(video)
    rate = float(fps) if fps is not None else info.fps
    if not rate > 0:
        raise BadInputError(f"frame rate must be positive, got {rate}; pass --fps")
    if seams is not None and any(s < 1 for s in seams):
        raise BadInputError(f"seam indices must be >= 1 (frame index where a new chunk starts), got {seams}")
    waveform = load_audio(audio, AUDIO_SAMPLE_RATE)  # before the video pass: a bad audio file fails fast
    tracker = IdentityTracker(_reference_frame(reference, info), face_box) if reference is not None else None

    cells: list[np.ndarray] = []  # (GRID, GRID) per frame
    similarities: list[float] = []
    changes: list[float] = [0.0]  # changes[t]: frame t - 1 -> t
    second_differences: list[float] = []
    before = previous = None
    for frame in iter_frames(video):
        if tracker is None:
            tracker = IdentityTracker(frame, face_box)
        cells.append(frame_cells(frame))
        similarities.append(tracker.similarity(frame))
        if previous is not None:
            changes.append(frame_change(previous, frame))
        if before is not None:
            second_differences.append(second_difference(before, previous, frame))
        before, previous = previous, frame

    n = len(cells)
    result: dict = {"video": str(video), "frames": n, "fps": rate, "width": info.width, "height": info.height,
                    "duration_s": round(n / rate, 3)}  # fmt: skip
    envelope = audio_envelope(waveform, AUDIO_SAMPLE_RATE, rate, n)
    result.update(measure_lipsync(np.stack(cells), envelope, rate, (info.width, info.height)))
    result.update(summarize_identity(np.asarray(similarities), rate))
    result["identity_reference"] = "image" if reference is not None else "first_frame"
    if seams:
        result.update(measure_seams(np.asarray(changes), list(seams)))
    else:
        result["seam_ratio"] = None
    result.update(measure_flicker(np.asarray(second_differences)))
    result["eval_s"] = round(time.perf_counter() - started, 3)
    return result


def _reference_frame(path: Path, info: VideoInfo) -> np.ndarray:
    """The reference image framed like the video (centre-cropped to its aspect), at analysis size, float32 RGB."""
    side = max(info.width, info.height)
    square = load_reference_image(path, side, fit="crop")  # (side, side, 3) uint8
    top, left = (side - info.height) // 2, (side - info.width) // 2
    framed = square[top : top + info.height, left : left + info.width]
    small = Image.fromarray(framed).resize((ANALYSIS_SIZE, ANALYSIS_SIZE), Image.Resampling.BOX)
    return np.asarray(small, dtype=np.float32)
