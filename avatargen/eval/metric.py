"""The ``Metric`` protocol: one measure of a talking-head video, in one file (docs/eval.md, "Adding a metric")."""

from __future__ import annotations

from typing import Any, Protocol

from avatargen.eval.context import EvalContext, Frame
from avatargen.eval.face_track import TrackedFace

Rows = list[tuple[str, str]]  # (label, text) lines of the text report


class Metric(Protocol):
    """One measure: built once per evaluation from what every metric shares, fed every analysed frame in order with
    what the face tracker found there, then summarised into its keys of the result.

    ``evaluate_video`` builds each registered metric (``avatargen.eval.registry``) as ``Metric(context)``; a metric
    that cannot measure (its input is missing) says why with ``context.note`` and gives its keys as None. A key
    ending in ``_note`` is listed in the result's ``notes`` too. Subclass it to inherit the defaults of ``curves``
    and ``rows``."""

    def __init__(self, context: EvalContext) -> None: ...

    def update(self, frame: Frame, face: TrackedFace | None) -> None:
        """Measure one frame; ``face``: what the tracker found in it (None: no face)."""

    def summary(self) -> dict[str, Any]:
        """This metric's keys of the result (JSON-able; new keys: a key another metric gives is an error)."""

    def curves(self) -> dict[str, list[Any]]:
        """Per-frame signals for the contact sheet (``evaluate_video(..., curves=True)``), asked for after
        ``summary``; none by default."""
        return {}

    @staticmethod
    def rows(result: dict[str, Any]) -> Rows:
        """This metric's lines of the text report, from ``result`` (which may lack its keys: a result measured
        without it); none by default."""
        return []
