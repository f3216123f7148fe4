"""``evaluate_video``: what a viewer sees in a talking-head video, measured with real face networks, in one pass.

Works on any video ffmpeg decodes, ours or another model's. Each frame is decoded (at most 512 px on its long side),
the face is found and measured at once (``face_track.py``), and reduced to what the metrics keep: a few floats per
frame and a face descriptor every second. Memory is O(frames x 10 floats) plus one frame.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
from PIL import Image

from avatargen.errors import BadInputError
from avatargen.eval.face_track import FaceTracker, chip_measures
from avatargen.eval.flicker import measure_flicker, second_difference
from avatargen.eval.identity import EMBED_EVERY_S, summarize_identity
from avatargen.eval.motion import measure_blinks, measure_head_motion
from avatargen.eval.region_sync import frame_cells, measure_region_sync
from avatargen.eval.seams import coarse_gray, find_periodic_seams, frame_change, measure_known_seams
from avatargen.eval.sharpness import measure_sharpness
from avatargen.eval.sync import frame_rms, measure_sync
from avatargen.eval.video import analysis_size, iter_frames, keyframe_indices, probe_video
from avatargen.eval.mouth_spill import MouthSpill
from avatargen.face.choice import shared_lip_finder
from avatargen.face.detector import INSTALL_HINT, Face, FaceDetector, shared_detector
from avatargen.face.lips import lips_installed
from avatargen.io.audio import load_audio
from avatargen.io.image import Reference, load_reference

AUDIO_SAMPLE_RATE = 16000  # enough for a loudness envelope, and what the audio encoder uses
REFERENCE_SIDES = (512, 256, 384)  # the reference (whole image, padded to a square) is searched at these sizes
FLICKER_SIDE = 64
_SAME_SCALE = 1.1  # a video's face within this factor of the reference's size is compared with the reference unscaled


def evaluate_video(
    video: Path,
    audio: Path,
    reference: Path | None = None,
    seams: list[int] | None = None,
    fps: float | None = None,
    *,
    curves: bool = False,
    face: int | None = None,
) -> dict:
    """Measure face presence, identity, lip sync, sharpness, seams, flicker, head motion and blinks of ``video``.

    ``reference``: the image the video should look like (default: the first frame with a face, and the identity
    keys then measure drift from it); ``seams``: frame indices where avatargen's chunks meet (a seam at s: frames
    s - 1 and s come from different chunks), measured besides the blind search; ``fps``: overrides the rate ffmpeg
    reports; ``curves``: also return the per-frame signals under ``curves`` (what ``write_sheet`` plots); ``face``:
    the face measured, counted left to right from 1 in the reference and in the video (a render's ``--face``; None:
    the most confident). Returns a
    JSON-able dict (keys in docs/eval.md); ``notes`` holds one line per thing measured with
    doubt or not at all. Raises ``BadInputError`` (one line) for a missing or undecodable video, audio or
    reference, a bad seam or fps, and ``FaceExtraMissing`` when ``avatargen[eval]`` is not installed.
    """
    started = time.perf_counter()
    detector = shared_detector()
    video, audio = Path(video), Path(audio)
    info = probe_video(video)
    rate = float(fps) if fps is not None else info.fps
    if not rate > 0:
        raise BadInputError(f"frame rate must be positive, got {rate}; pass --fps")
    if seams is not None and any(s < 1 for s in seams):
        raise BadInputError(f"seam indices must be >= 1 (frame index where a new chunk starts), got {seams}")
    waveform = load_audio(audio, AUDIO_SAMPLE_RATE)  # before the video pass: a bad audio file fails fast
    notes: list[str] = []
    reference_embedding, reference_face = None, None
    if reference is not None:
        for side in REFERENCE_SIDES:  # HOG looks at fixed scales: a stylised face found at one may be missed at another
            loaded = load_reference(reference, side, fit="pad")
            image = loaded.square
            in_reference = detector.find_all(image) if face is not None else []
            chosen = in_reference[face - 1] if len(in_reference) >= (face or 1) and in_reference else detector.find(image)
            if chosen is not None:
                break
        if chosen is None:
            notes.append(f"no face found in the reference image '{reference}': identity and sharpness not measured")
        else:
            reference_embedding = detector.embedding(image, chosen)
            reference_face = (loaded, side, chosen)

    spill = _mouth_spill(reference_face, notes) if reference_face is not None else None
    tracker = FaceTracker(detector, embed_every=max(1, int(round(EMBED_EVERY_S * rate))), number=face)
    changes: list[float] = [0.0]  # changes[t]: frame t - 1 -> t
    second_differences: list[float] = []
    cells: list[np.ndarray] = []  # (8, 8) per frame, for the region second opinion on sync
    before = previous = previous_coarse = None
    n = 0
    for n, frame in enumerate(iter_frames(video, analysis_size(info)), start=1):
        tracked = tracker.update(n - 1, frame)
        if spill is not None:
            spill.update(frame, tracked)
        coarse, small = coarse_gray(frame), coarse_gray(frame, FLICKER_SIDE)
        cells.append(frame_cells(small))
        if previous_coarse is not None:
            changes.append(frame_change(previous_coarse, coarse))
        if before is not None:
            second_differences.append(second_difference(before, previous, small))
        before, previous, previous_coarse = previous, small, coarse

    track = tracker.track.arrays()
    width, height = analysis_size(info)
    result: dict = {"video": str(video), "frames": n, "fps": rate, "width": info.width, "height": info.height,
                    "analysed_at": [width, height], "duration_s": round(n / rate, 3)}  # fmt: skip
    found = float(track["detected"].mean()) if n else 0.0
    result["face_found"] = round(found, 4)
    if found < 0.5:
        notes.append(f"a face was found in only {found:.0%} of frames: face metrics cover those frames only")

    rms = frame_rms(waveform, AUDIO_SAMPLE_RATE, rate, n)
    result.update(measure_sync(track["mouth"], rms, rate))
    result.update(measure_region_sync(np.asarray(cells).reshape(-1, 8, 8), rms, rate))
    main, second = result["offset_frames"], result["sync_region_offset"]
    if main is not None and second is not None and abs(main - second) > 1:
        notes.append(f"the two lip-sync measures disagree: mouth opening {main:+d} frames, image region {second:+d}")
    elif main is None and second is not None and result["sync_note"] and "face" in result["sync_note"]:
        notes.append(f"without a face, the image-region measure finds offset {second:+d} frames")
    boxes = np.asarray(tracker.track.mouth_box, float).reshape(-1, 4)
    boxes = boxes[np.isfinite(boxes).all(axis=1)]
    result["mouth_box"] = [round(float(v)) for v in np.median(boxes, axis=0)] if len(boxes) else None

    if reference_embedding is None and tracker.track.embeddings and reference is None:
        first = min(tracker.track.embeddings)
        reference_embedding = tracker.track.embeddings[first]
        notes.append("no reference image: identity is the distance to the video's first face (drift only)")
    if reference_embedding is not None:
        result.update(summarize_identity(tracker.track.embeddings, reference_embedding, rate))
    else:
        result["identity_distance"] = None
    result["identity_reference"] = "image" if reference is not None else "first_frame"

    reference_sharpness = None
    if reference_face is not None and np.isfinite(track["spread"]).any():
        reference_sharpness = reference_sharpness_at(detector, *reference_face, float(np.nanmedian(track["spread"])))
    result.update(measure_sharpness(track["sharpness"], reference_sharpness))
    keyframes = keyframe_indices(video, rate)
    change_array = np.asarray(changes)
    result["keyframes"] = len(keyframes)
    result.update(find_periodic_seams(change_array, keyframes, rate))
    if seams:
        result.update(measure_known_seams(change_array, list(seams), keyframes))
    else:
        result["seam_ratio"] = None
    result.update(measure_flicker(np.asarray(second_differences)))
    result.update(spill.summary() if spill is not None else {"mouth_spill_frames": None})
    result.update(measure_head_motion(track["centre"], rate))
    result.update(measure_blinks(track["eyes"], rate))
    if curves:
        result["curves"] = {
            "change": [round(float(c), 3) for c in changes],
            "mouth": [None if not np.isfinite(m) else round(float(m), 4) for m in track["mouth"]],
            "loudness": [round(float(r), 5) for r in rms],
            "identity": result.pop("identity_curve", []),
        }
    result.pop("identity_curve", None)
    notes += [result[key] for key in ("sync_note", "identity_note", "seam_note") if result.get(key)]
    result["notes"] = notes
    result["eval_s"] = round(time.perf_counter() - started, 3)
    return result


def reference_sharpness_at(detector: FaceDetector, reference: Reference, side: int, face: Face, spread: float) -> float:
    """The Laplacian variance of the reference's face chip with the face at the video's size: ``face`` was found in
    ``reference`` padded and scaled to ``side``; ``spread`` is the video's median ``Face.spread``.

    The chip resamples every face to 150 px, but how much detail it keeps depends on the pixels it came from: a
    256-px face upscaled to 512 px first gives a chip ~1.5x as detailed as the same face shown at 256 px. So the
    chip is taken from the picture as it was given, unscaled, when the video shows the face within 10 % of that
    size (a video that is the picture itself then scores 1; resampling it by a few per cent would blur it as much as
    the motion being measured), else from the picture scaled to the video's size."""
    left, top, square_side = reference.crop
    to_picture = square_side / side
    face = _scaled_face(face, to_picture, (left, top))
    picture = reference.picture
    ratio = spread / face.spread
    if abs(math.log(ratio)) > math.log(_SAME_SCALE):
        height, width = picture.shape[:2]
        size = (max(1, round(width * ratio)), max(1, round(height * ratio)))
        picture = np.asarray(Image.fromarray(picture).resize(size, Image.Resampling.LANCZOS))
        face = _scaled_face(face, size[0] / width, (0.0, 0.0))
    # The landmarks as the detector places them at this scale, as in the video's frames (the chip's scale follows
    # them); the face mapped from the search is kept where the detector finds another one or none.
    found = detector.find(picture, near=face)
    if found is not None and np.abs(found.points - face.points).max() <= 0.1 * face.width:
        face = found
    return chip_measures(detector.chip(picture, face))[2]


def _mouth_spill(reference_face: tuple[Reference, int, Face], notes: list[str]) -> MouthSpill | None:
    """The spill measure against the reference ``(loaded, side, face)`` (the face found in its square at ``side``),
    or None, with a note, where its lips are not found."""
    loaded, side, face = reference_face
    left, top, square_side = loaded.crop
    face = _scaled_face(face, square_side / side, (left, top))
    if not lips_installed():
        notes.append(f"mouth spill not measured: finding the lips needs MediaPipe's face mesh ({INSTALL_HINT})")
        return None
    search = shared_lip_finder().find(loaded.picture, face)
    if search.lips is None:
        notes.append(f"mouth spill not measured: the reference's lips were not found reliably ({search.problem})")
        return None
    return MouthSpill(loaded.picture, face, search.lips)


def _scaled_face(face: Face, scale: float, offset: tuple[float, float]) -> Face:
    """``face`` in pixels scaled by ``scale``, then moved by ``offset`` (x, y)."""
    x, y = offset
    box = face.box
    moved = (box[0] * scale + x, box[1] * scale + y, box[2] * scale + x, box[3] * scale + y)
    return Face(tuple(int(round(v)) for v in moved), face.points * scale + np.asarray(offset), face.score)
