"""One model set per process, whatever the family: a batch that alternates models keeps only the current one."""

from __future__ import annotations

import gc
import weakref

import torch

from avatargen.config.loader import load_config, to_config
from avatargen.pipeline import build
from avatargen.runtime.distributed import ParallelContext, world_info
from tests.conftest import engine_of

CPU = torch.device("cpu")


def test_switching_family_releases_the_previous_model_set() -> None:
    parallel = ParallelContext(world_info())
    tiny = to_config(load_config(["model.weights=random"]))
    wan = to_config(load_config(["model=wan_tiny"]))
    first = build.place_models(tiny, engine_of(tiny), CPU, parallel)
    assert build.place_models(tiny, engine_of(tiny), CPU, parallel) is first  # reused while the config holds
    released = weakref.ref(first)
    del first
    second = build.place_models(wan, engine_of(wan), CPU, parallel)
    gc.collect()
    assert released() is None and list(build._cache.values()) == [second]
