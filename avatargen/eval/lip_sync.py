"""Lip sync: the mouth opening against the loudness (``sync.py``), with the image region that best follows the
loudness as a second opinion that needs no face (``region_sync.py``); a note where the two disagree by more than a
frame. Where the mouth opening is not clearly above chance but the image region is (a moustache or a beard over the
mouth's region of the face chip, whose spread then hardly changes), ``sync_note`` says that the image region follows
the audio, not that the mouth does not (``second_opinion``). Also ``mouth_box``: the median mouth region in the
analysed frames (the mouth sheet's crop)."""

from __future__ import annotations

from typing import Any

import numpy as np

from avatargen.eval.context import EvalContext, Frame
from avatargen.eval.face_track import TrackedFace
from avatargen.eval.metric import Metric, Rows
from avatargen.eval.region_sync import GRID, frame_cells, measure_region_sync
from avatargen.eval.sync import measure_sync

REGION_SIDE = 64  # the second opinion's grid is laid over the frame reduced to this many pixels a side


class LipSync(Metric):
    """``offset_frames`` and the ``sync_*`` keys (``measure_sync``), the ``sync_region_*`` keys
    (``measure_region_sync``) and ``mouth_box``."""

    def __init__(self, context: EvalContext) -> None:
        self.context = context
        self.mouth: list[float] = []  # opening per frame, NaN without a face
        self.cells: list[np.ndarray] = []  # (GRID, GRID) per frame
        self.boxes: list[tuple[float, float, float, float]] = []  # the frames with a face only

    def update(self, frame: Frame, face: TrackedFace | None) -> None:
        self.mouth.append(np.nan if face is None else face.mouth)
        self.cells.append(frame_cells(frame.gray(REGION_SIDE)))
        if face is not None:
            self.boxes.append(face.mouth_box)

    def summary(self) -> dict[str, Any]:
        fps = self.context.fps
        rms = self.context.loudness(len(self.mouth))
        result = measure_sync(np.asarray(self.mouth, float), rms, fps)
        result.update(measure_region_sync(np.asarray(self.cells).reshape(-1, GRID, GRID), rms, fps))
        main, second = result["offset_frames"], result["sync_region_offset"]
        if main is not None and second is not None and abs(main - second) > 1:
            self.context.note(f"the two lip-sync measures disagree: mouth opening {main:+d} frames, image region "
                              f"{second:+d}")  # fmt: skip
        elif main is None and second is not None and result["sync_note"] and "face" in result["sync_note"]:
            self.context.note(f"without a face, the image-region measure finds offset {second:+d} frames")
        result["sync_note"] = second_opinion(result)
        boxes = np.asarray(self.boxes, float).reshape(-1, 4)
        result["mouth_box"] = [round(float(v)) for v in np.median(boxes, axis=0)] if len(boxes) else None
        return result

    def curves(self) -> dict[str, list[Any]]:
        return {"mouth": [None if not np.isfinite(m) else round(float(m), 4) for m in self.mouth]}

    @staticmethod
    def rows(result: dict[str, Any]) -> Rows:
        offset, confidence = result.get("offset_frames"), result.get("sync_confidence")
        if offset is None:
            return [("lip sync", f"no offset: {result.get('sync_note') or 'not measured'}")]
        return [("lip sync", f"offset {offset:+d} frames (+ = video late), confidence {confidence:.2f} (out of sync: "
                             f"{result['sync_chance']:.2f} +- {result['sync_chance_sd']:.2f}, best "
                             f"{result['sync_chance_max']:.2f})")]  # fmt: skip


def second_opinion(result: dict[str, Any]) -> str | None:
    """``result``'s ``sync_note``, unless it says the mouth does not follow the audio while the image region finds
    the offset (``sync_region_offset``, clearly above its own chance): then a note that says so."""
    note, second = result.get("sync_note"), result.get("sync_region_offset")
    if note is None or "does not follow" not in note or second is None:
        return note
    return (f"the mouth opening is not clearly above chance (peak {result['sync_confidence']:.2f}, best out of sync "
            f"{result['sync_chance_max']:.2f}: a moustache or a beard can hide it), but the image region follows the "
            f"audio at offset {second:+d} frames (confidence {result['sync_region_confidence']:.2f} against "
            f"{result['sync_region_chance_max']:.2f} out of sync)")
