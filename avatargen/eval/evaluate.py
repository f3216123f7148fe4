"""``evaluate_video``: what a viewer sees in a talking-head video, measured with real face networks, in one pass.

Works on any video ffmpeg decodes, ours or another model's. Each frame is decoded (at most 512 px on its long side),
the face is found and measured once (``face_track.py``), and every metric (``registry.py``) is fed the frame and
what the tracker found; each keeps what it needs (a few floats per frame), so memory is O(frames x 10 floats) plus
one frame. The result is a short header (the video's size, rate, duration), then each metric's keys in turn.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from avatargen.errors import BadInputError
from avatargen.eval.context import EvalContext, Frame, ReferenceFace
from avatargen.eval.face_track import FaceTracker
from avatargen.eval.registry import metric_classes
from avatargen.eval.video import analysis_size, iter_frames, probe_video, video_start_s
from avatargen.face.detector import FaceDetector, shared_detector
from avatargen.io.audio import load_audio
from avatargen.io.image import load_reference

AUDIO_SAMPLE_RATE = 16000  # enough for a loudness envelope, and what the audio encoder uses
REFERENCE_SIDES = (512, 256, 384)  # the reference (whole image, padded to a square) is searched at these sizes


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
    """Measure face presence, identity, lip sync, sharpness, seams, flicker, head motion, blinks, mouth spill and
    every registered metric of ``video``.

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
        raise BadInputError(f"video '{video}' gives no frame rate (read {rate}); re-encode it with one (ffmpeg -r 25)")
    if seams is not None and any(s < 1 for s in seams):
        raise BadInputError(f"seam indices must be >= 1 (frame index where a new chunk starts), got {seams}")
    seams = sorted(set(seams)) if seams is not None else None  # a seam given twice is one seam, not two
    waveform = load_audio(audio, AUDIO_SAMPLE_RATE)  # before the video pass: a bad audio file fails fast
    # frame 0 is shown at the video stream's start on the file's timeline: the sound from then on goes with it
    waveform = waveform[round(video_start_s(video) * AUDIO_SAMPLE_RATE) :]
    notes: list[str] = []
    found = _reference_face(detector, reference, face) if reference is not None else None
    if reference is not None and found is None:
        notes.append(f"no face found in the reference image '{reference}': identity and sharpness not measured")
    context = EvalContext(video=video, info=info, fps=rate, detector=detector, audio=waveform,
                          sample_rate=AUDIO_SAMPLE_RATE, reference_image=reference, reference=found,
                          seams=tuple(seams) if seams is not None else None, notes=notes)  # fmt: skip

    metrics = [metric(context) for metric in metric_classes()]
    tracker = FaceTracker(detector, number=face)
    n = 0
    for n, pixels in enumerate(iter_frames(video, analysis_size(info)), start=1):
        frame, tracked = Frame(n - 1, (n - 1) / rate, pixels), tracker.measure(pixels)
        for metric in metrics:
            metric.update(frame, tracked)

    result: dict[str, Any] = {"video": str(video), "frames": n, "fps": rate, "width": info.width,
                              "height": info.height, "analysed_at": list(analysis_size(info)),
                              "duration_s": round(n / rate, 3)}  # fmt: skip
    for metric in metrics:
        keys = metric.summary()
        if taken := sorted(keys.keys() & result.keys()):
            raise ValueError(f"metric {type(metric).__name__} gives keys another already gave: {taken}")
        result.update(keys)
    audio_s, video_s = len(waveform) / AUDIO_SAMPLE_RATE, n / rate
    if n and audio_s < 0.5 * video_s:  # another file's audio, most likely: a sync figure would mean nothing
        result.update(offset_frames=None, sync_note=f"the audio ({audio_s:.2f} s) covers under half of the video "
                      f"({video_s:.2f} s): lip sync not measured; give the video's own audio")  # fmt: skip
    elif n and abs(audio_s - video_s) > max(0.5, 0.1 * video_s):
        notes.append(f"the audio ({audio_s:.2f} s) and the video ({video_s:.2f} s) differ in length: lip sync is "
                     "measured over the time they share; check that it is the video's own audio")  # fmt: skip
    if curves:
        result["curves"] = {"loudness": [round(float(r), 5) for r in context.loudness(n)]}
        for metric in metrics:
            result["curves"].update(metric.curves())
    notes += [value for key, value in result.items() if key.endswith("_note") and value]
    result["notes"] = notes
    result["eval_s"] = round(time.perf_counter() - started, 3)
    return result


def _reference_face(detector: FaceDetector, reference: Path, number: int | None) -> ReferenceFace | None:
    """The face of the ``reference`` image (face ``number`` left to right; None: the most confident), or None."""
    for side in REFERENCE_SIDES:  # HOG looks at fixed scales: a stylised face found at one may be missed at another
        loaded = load_reference(reference, side, fit="pad")
        image = loaded.square
        in_reference = detector.find_all(image) if number is not None else []
        chosen = in_reference[number - 1] if len(in_reference) >= (number or 1) and in_reference else detector.find(image)
        if chosen is not None:
            return ReferenceFace(loaded, side, chosen, detector.embedding(image, chosen))
    return None
