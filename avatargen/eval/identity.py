"""Identity: how far the face in the video is from the face in the reference image, on a face-recognition network.

Distances are Euclidean between 128-d descriptors of dlib's ResNet (``FaceDetector.embedding``), taken every
``EMBED_EVERY_S`` seconds. By dlib's documentation two photographs of the same person are below
``SAME_PERSON_DISTANCE`` = 0.6 (99.38 % right on LFW). That network was trained on photographs: different cartoon
avatars of the training generator sit at 0.43-0.59 from each other, below that threshold, so on cartoons a small
distance says "the same kind of face", not "the same person" (docs/eval.md). Without a reference image the
video's first descriptor stands in for it: the distances then measure drift.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from avatargen.eval.context import EvalContext, Frame
from avatargen.eval.face_track import TrackedFace
from avatargen.eval.metric import Metric, Rows
from avatargen.face.detector import SAME_PERSON_DISTANCE

EMBED_EVERY_S = 1.0  # a descriptor costs ~0.1 s of CPU: one a second keeps eval at a fraction of real time
WINDOW_S = 10.0  # the worst window and the drift (first vs last window) are over this many seconds


def summarize_identity(embeddings: dict[int, np.ndarray], reference: np.ndarray, fps: float) -> dict:
    """``embeddings``: frame index -> (128,) descriptor; ``reference``: (128,). Returns the ``identity_*`` keys."""
    if not embeddings:
        return {"identity_distance": None, "identity_note": "no face found in the video to compare"}
    frames = np.array(sorted(embeddings))
    distances = np.array([float(np.linalg.norm(embeddings[int(f)] - reference)) for f in frames])
    window = WINDOW_S * fps
    buckets = (frames // window).astype(int)
    means = [float(distances[buckets == b].mean()) for b in np.unique(buckets)]
    return {
        "identity_distance": round(float(distances.mean()), 4),
        "identity_distance_p95": round(float(np.percentile(distances, 95)), 4),
        "identity_distance_worst_window": round(max(means), 4),
        "identity_drift": round(means[-1] - means[0], 4),  # last window minus first: > 0 drifts away
        "identity_same_person_share": round(float(np.mean(distances < SAME_PERSON_DISTANCE)), 4),
        "identity_threshold": SAME_PERSON_DISTANCE,
        "identity_samples": int(len(distances)),
        "identity_curve": [[int(f), round(float(d), 4)] for f, d in zip(frames, distances)],
    }


class Identity(Metric):
    """The ``identity_*`` keys: a descriptor of the video's face every ``EMBED_EVERY_S`` seconds against the
    reference image's (or the video's first one); ``identity_reference`` says which."""

    def __init__(self, context: EvalContext) -> None:
        self.context = context
        self.every = max(1, int(round(EMBED_EVERY_S * context.fps)))
        self.embeddings: dict[int, np.ndarray] = {}  # frame index -> (128,)
        self.curve: list[list[float]] = []

    def update(self, frame: Frame, face: TrackedFace | None) -> None:
        if face is not None and frame.index % self.every == 0:
            self.embeddings[frame.index] = self.context.detector.embedding(frame.pixels, face.face)

    def summary(self) -> dict[str, Any]:
        context = self.context
        reference = context.reference.embedding if context.reference is not None else None
        if reference is None and self.embeddings and context.reference_image is None:
            reference = self.embeddings[min(self.embeddings)]
            context.note("no reference image: identity is the distance to the video's first face (drift only)")
        result: dict[str, Any] = {"identity_distance": None}
        if reference is not None:
            result = summarize_identity(self.embeddings, reference, context.fps)
            self.curve = result.pop("identity_curve", [])
        result["identity_reference"] = "image" if context.reference_image is not None else "first_frame"
        return result

    def curves(self) -> dict[str, list[Any]]:
        return {"identity": self.curve}

    @staticmethod
    def rows(result: dict[str, Any]) -> Rows:
        distance = result.get("identity_distance")
        if distance is None:
            return []
        against = "the reference image" if result.get("identity_reference") == "image" else "the first frame"
        return [("identity", f"distance {distance:.2f} to {against} (p95 {result['identity_distance_p95']:.2f}, "
                             f"worst 10 s {result['identity_distance_worst_window']:.2f}, drift "
                             f"{result['identity_drift']:+.2f}; < {result['identity_threshold']} = same "
                             "person)")]  # fmt: skip
