"""Which metrics ``evaluate_video`` runs and the text report shows, in this order: the built-in ones (``BUILT_IN``),
those registered in this process (``register_metric``), then the ``avatargen.metrics`` entry points of installed
packages (each names a ``Metric`` class). A new metric is one file that joins by either way: avatargen is not
edited."""

from __future__ import annotations

from importlib.metadata import entry_points

from avatargen.eval.blinks import Blinks
from avatargen.eval.face_presence import FacePresence
from avatargen.eval.flicker import Flicker
from avatargen.eval.head_motion import HeadMotion
from avatargen.eval.identity import Identity
from avatargen.eval.lip_sync import LipSync
from avatargen.eval.metric import Metric
from avatargen.eval.mouth_spill import MouthSpillMetric
from avatargen.eval.seams import Seams
from avatargen.eval.sharpness import Sharpness

ENTRY_POINT_GROUP = "avatargen.metrics"
BUILT_IN: tuple[type[Metric], ...] = (FacePresence, LipSync, Identity, Sharpness, Seams, Flicker, MouthSpillMetric,
                                      HeadMotion, Blinks)  # fmt: skip

_registered: list[type[Metric]] = []


def register_metric(metric: type[Metric]) -> None:
    """Run ``metric`` in every later evaluation of this process, after those already known, and show its rows in the
    text report. Registering the same class twice runs it once."""
    if metric not in _registered:
        _registered.append(metric)


def unregister_metric(metric: type[Metric]) -> None:
    """Undo ``register_metric``."""
    if metric in _registered:
        _registered.remove(metric)


def metric_classes() -> list[type[Metric]]:
    """Every metric, each once, in the order they run and report."""
    found = [*BUILT_IN, *_registered, *(entry.load() for entry in entry_points(group=ENTRY_POINT_GROUP))]
    return list(dict.fromkeys(found))
