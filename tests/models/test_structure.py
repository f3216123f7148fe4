"""What models declare to the runtime: their block stacks, in the order their forward runs them.

Block offload prefetches and FSDP chains its all-gathers in the declared order, so a stack declared out of order
would make every block wait for its copy: each model's forward must visit its declared blocks exactly in order.
"""

from __future__ import annotations

import pytest
import torch

from avatargen.config import load_config, to_config
from avatargen.models.structure import model_blocks
from avatargen.families.tiny.build import module_specs
from tests.core.test_placement import forward


@pytest.fixture(scope="module")
def specs():
    return {spec.name: spec for spec in module_specs(to_config(load_config()))}


@pytest.mark.parametrize("name, count", [("a2v", 4), ("sr", 5)])
def test_a_dit_declares_its_blocks_in_the_order_its_forward_runs_them(specs, name, count):
    torch.manual_seed(0)
    model = specs[name].build().eval()
    blocks = model_blocks(model)
    assert len(blocks) == count
    visited: list[int] = []
    for index, block in enumerate(blocks):
        block.register_forward_pre_hook(lambda module, args, index=index: visited.append(index))
    with torch.inference_mode():
        forward(name, model)
    calls = len(visited) // count
    assert calls >= 1 and visited == list(range(count)) * calls


@pytest.mark.parametrize("name", ["audio_encoder", "text_encoder", "vae"])
def test_small_models_declare_no_blocks_and_are_placed_whole(specs, name):
    assert model_blocks(specs[name].build()) == []
