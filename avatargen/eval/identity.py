"""Identity: how far the face in the video is from the face in the reference image, on a face-recognition network.

Distances are Euclidean between 128-d descriptors of dlib's ResNet (``FaceDetector.embedding``), taken every
``EMBED_EVERY_S`` seconds. By dlib's documentation two photographs of the same person are below
``SAME_PERSON_DISTANCE`` = 0.6 (99.38 % right on LFW). That network was trained on photographs: different cartoon
avatars of the training generator sit at 0.43-0.59 from each other, below that threshold, so on cartoons a small
distance says "the same kind of face", not "the same person" (docs/eval.md).
"""

from __future__ import annotations

import numpy as np

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
