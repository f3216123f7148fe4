"""A non-primary rank of a render over several ranks: it runs its share of what rank 0 runs, and writes nothing."""

from __future__ import annotations

from typing import Any

import numpy as np

from avatargen.io.null_sink import NullSink
from avatargen.pipeline.pipeline import Pipeline
from avatargen.pipeline.run import RenderRun


def render_as_follower(pipeline: Pipeline, reference: np.ndarray, source: Any, prompt: str, run: RenderRun) -> dict[str, Any]:
    """A non-primary rank of a render over several ranks: the same steps and collectives as rank 0, frames into a
    NullSink, the user's output path never touched; ``run`` is rank 0's (``RenderRun.followed``: the same work and
    resume point, this rank's stop check). Returns a small report (the primary's is the real one)."""
    try:
        stats = pipeline.render(reference, source, [NullSink()], prompt, run)
    finally:
        source.close()
        if run.inputs.video is not None:
            run.inputs.video.close()
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
