"""Face presence: the share of frames in which the detector found a face (``face_found``). Every face metric covers
those frames only, so below half of them a note says so."""

from __future__ import annotations

from typing import Any

from avatargen.eval.context import EvalContext, Frame
from avatargen.eval.face_track import TrackedFace
from avatargen.eval.metric import Metric, Rows

FEW_FACES = 0.5  # below this share of frames with a face, a note


class FacePresence(Metric):
    """``face_found``: the share of frames with a face."""

    def __init__(self, context: EvalContext) -> None:
        self.context = context
        self.frames = 0
        self.with_face = 0

    def update(self, frame: Frame, face: TrackedFace | None) -> None:
        self.frames += 1
        self.with_face += face is not None

    def summary(self) -> dict[str, Any]:
        found = self.with_face / self.frames if self.frames else 0.0
        if found < FEW_FACES:
            self.context.note(f"a face was found in only {found:.0%} of frames: face metrics cover those frames only")
        return {"face_found": round(found, 4)}

    @staticmethod
    def rows(result: dict[str, Any]) -> Rows:
        return [("face found", f"{result.get('face_found', 0.0):.0%} of frames")]
