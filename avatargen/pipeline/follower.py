"""A non-primary rank of a render over several ranks: it runs its share of what rank 0 runs, and writes nothing."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from avatargen.io.null_sink import NullSink
from avatargen.pipeline.pipeline import Pipeline


def render_as_follower(
    pipeline: Pipeline, reference: np.ndarray, source: Any, prompt: str, should_stop: Callable[[], bool],
    **render_options: Any,
) -> dict[str, Any]:
    """A non-primary rank of a render over several ranks: the same steps and collectives as rank 0, frames into a
    NullSink, the user's output path never touched; ``render_options`` are the primary's that shape the work
    (``read_box``, and ``resume``: the resume point rank 0 read). Returns a small report (the primary's is the real
    one)."""
    try:
        stats = pipeline.render(reference, source, [NullSink()], prompt, should_stop=should_stop, **render_options)
    finally:
        source.close()
        inputs = render_options.get("inputs")
        if inputs is not None and inputs.video is not None:
            inputs.video.close()
    duration = stats.frames / pipeline.fps
    wall = stats.wall_s
    # The same keys as the primary's report, so any caller can print it; "output" says who wrote the video.
    return {"output": "(no output on this rank: rank 0 writes it)", "weights": None, "frames": stats.frames,
            "fps": pipeline.fps, "duration_s": round(duration, 4), "chunks": stats.n_chunks,
            "i_chunks": stats.i_chunks, "ttff_s": None, "wall_s": round(wall, 4),
            "gen_fps": round(stats.frames / wall, 3) if wall > 0 else None,
            "rtf": round(wall / duration, 4) if duration > 0 else None, "peak_rss_mb": None, "device": None,
            "stage_s": {k: round(v, 4) for k, v in stats.stage_s.items()}, "seams": stats.seams,
            "resumed_from": stats.resumed_from}  # fmt: skip
