"""Which pipeline renders a config: avatargen's own models, or a Wan-family model (``model.wan`` set)."""

from __future__ import annotations

from typing import Any, Callable

import torch

from avatargen.config.schema import Config
from avatargen.pipeline.build import place_modules
from avatargen.runtime.distributed import ParallelContext


def build_pipeline(
    config: Config, device: torch.device, parallel: ParallelContext, warn: Callable[[str], None]
) -> tuple[Any, Any]:
    """(the placed model set, the pipeline over it) for ``config``: the set has ``monitor``, the pipeline
    ``render()`` and ``schedule``, whichever family the model is."""
    if config.model.wan is None:
        from avatargen.pipeline.overlap import overlaps
        from avatargen.pipeline.pipeline import Pipeline

        models = place_modules(config, device, parallel)
        return models, Pipeline(config, models, overlap=overlaps(config, device, parallel.world.world_size))
    from avatargen.pipeline.wan_build import place_wan_modules
    from avatargen.pipeline.wan_pipeline import WanPipeline

    models = place_wan_modules(config, device, parallel)
    return models, WanPipeline(config, models)
