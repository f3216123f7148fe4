"""How the ranks of one render split it (avatargen/runtime/layout.py): what ``auto`` resolves to for each family and
world size, and the one-line errors for a layout the ranks or the model cannot hold."""

from __future__ import annotations

import pytest

from avatargen.config.loader import load_config, to_config
from avatargen.errors import ConfigError
from tests.conftest import engine_of
from avatargen.runtime.layout import SplittableWork, resolve_layout


def layout(world: int, *overrides: str):
    config = to_config(load_config(list(overrides)))
    found = resolve_layout(config, world, engine_of(config).splittable_work(config))
    return found.guidance, found.sequence, found.replicas, found.sharded


WAN = "model=wan_tiny"  # text and audio guidance: three DiT passes a step
TWO_PASSES = "model.wan.text_guide_scale=1"  # a distilled LoRA's setting: two passes a step


def test_one_process_splits_nothing_whatever_auto_would_do_under_torchrun():
    assert layout(1, WAN) == (1, 1, 1, False)
    assert layout(1) == (1, 1, 1, False)


@pytest.mark.parametrize("world, overrides, expected", [
    (2, [WAN], (1, 2, 1, True)),  # three passes do not divide over 2: the tokens do
    (3, [WAN], (3, 1, 1, False)),  # one pass a rank; no rank left to shard with
    (6, [WAN], (3, 2, 1, True)),
    (8, [WAN], (1, 8, 1, True)),
    (8, [WAN, TWO_PASSES], (2, 4, 1, True)),  # the 8-GPU layout: 2 guidance x 4 sequence
    (8, [WAN, TWO_PASSES, "runtime.shard=none"], (2, 4, 1, False)),  # for speed: whole weights, no all-gather
    (4, [WAN, "runtime.sequence_parallel=1", "runtime.guidance_parallel=false"], (1, 1, 4, True)),  # FSDP only
    (4, [WAN, "runtime.guidance_parallel=true"], (2, 2, 1, True)),  # 2 and 1 passes
    (4, [WAN, "runtime.sequence_parallel=2", "runtime.guidance_parallel=false"], (1, 2, 2, True)),
    (2, [], (1, 1, 2, True)),  # the bundled model: its ranks compute the same video, the DiTs FSDP-sharded
    (2, ["runtime.sequence_parallel=2"], (1, 2, 1, True)),  # its A2V's tokens split on request
])  # fmt: skip
def test_auto_and_explicit_layouts(world, overrides, expected):
    assert layout(world, *overrides) == expected


@pytest.mark.parametrize("world, overrides, message", [
    (2, ["runtime.guidance_parallel=true"], "runs one model pass per sampling step"),
    (3, [WAN, "runtime.sequence_parallel=2"], "runtime.sequence_parallel=2 does not divide the 3 rank(s)"),
    (1, [WAN, "runtime.sequence_parallel=2"], "runtime.sequence_parallel=2 does not divide the 1 rank(s)"),
    (3, [WAN, TWO_PASSES, "runtime.guidance_parallel=true"], "3 rank(s) cannot split the 2 guidance passes"),
    (4, [WAN, "runtime.sequence_parallel=2", "runtime.guidance_parallel=false", "runtime.shard=none"],
     "leaves 2 ranks computing the same video"),
])  # fmt: skip
def test_a_layout_the_ranks_or_the_model_cannot_hold_is_one_line_naming_the_key(world, overrides, message):
    with pytest.raises(ConfigError) as error:
        layout(world, *overrides)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_model_without_a_token_sequence_refuses_sequence_parallelism():
    config = to_config(load_config(["runtime.sequence_parallel=2"]))
    with pytest.raises(ConfigError) as error:
        resolve_layout(config, 2, SplittableWork())  # a family that declares nothing to split
    assert "model=tiny cannot split its tokens over ranks; set runtime.sequence_parallel=1" in str(error.value)


LIVE = "model=liveavatar_tiny"  # a causal family: 4 denoising steps a block, one KV ring each


def stages(world: int, *overrides: str):
    config = to_config(load_config(list(overrides)))
    found = resolve_layout(config, world, engine_of(config).splittable_work(config))
    return found.pipeline, found.replicas, found.sharded, found.report()


@pytest.mark.parametrize("world, overrides, expected", [
    (2, [LIVE, "runtime.pipeline_parallel=2"], 2),
    (4, [LIVE, "runtime.pipeline_parallel=4"], 4),
    (3, [LIVE, "runtime.pipeline_parallel=3"], 3),  # 4 steps over 3 stages: 2, 1, 1
    (2, [LIVE, "runtime.pipeline_parallel=auto"], 2),
    (1, [LIVE, "runtime.pipeline_parallel=auto"], 1),
    (2, [LIVE], 1),  # the default: the ranks FSDP-share the weights and compute the same video, as before
    (2, [WAN, "runtime.pipeline_parallel=auto"], 1),  # auto: only a causal family has steps to spread
])  # fmt: skip
def test_a_causal_family_spreads_its_steps_over_every_rank(world, overrides, expected):
    pipeline, replicas, sharded, report = stages(world, *overrides)
    assert pipeline == expected
    if expected > 1:  # each stage computes its own steps with the whole model
        assert (replicas, sharded) == (1, False)
        assert report == {"world": world, "guidance": 1, "sequence": 1, "replicas": 1, "weights": "whole on every rank",
                          "pipeline": expected}  # fmt: skip
    else:
        assert "pipeline" not in report


@pytest.mark.parametrize("world, overrides, message", [
    (2, ["runtime.pipeline_parallel=2"], "model=tiny cannot spread its denoising steps over ranks"),
    (2, [WAN, "runtime.pipeline_parallel=2"], "model=wan_tiny cannot spread its denoising steps over ranks"),
    (5, [LIVE, "runtime.pipeline_parallel=5"], "denoises a block in 4 steps, so its pipeline has at most 4 stages"),
    (1, [LIVE, "runtime.pipeline_parallel=2"], "2 pipeline stages on 1 rank(s)"),
    (4, [LIVE, "runtime.pipeline_parallel=2"], "run torchrun --nproc-per-node 2"),
    (2, [LIVE, "runtime.pipeline_parallel=4"], "2 rank(s); the pipeline takes every rank"),
    (8, [LIVE, "runtime.pipeline_parallel=auto"], "4 pipeline stages on 8 rank(s)"),
    (2, [LIVE, "runtime.pipeline_parallel=2", "runtime.sequence_parallel=2"], "does not combine with sequence parallel"),
    (2, [LIVE, "runtime.pipeline_parallel=2", "runtime.guidance_parallel=true"], "does not combine with a guidance split"),
    (2, [LIVE, "runtime.pipeline_parallel=2", "runtime.shard=fsdp"], "each stage holds the whole model"),
])  # fmt: skip
def test_a_pipeline_the_ranks_or_the_model_cannot_hold_is_one_line_naming_the_fix(world, overrides, message):
    with pytest.raises(ConfigError) as error:
        stages(world, *overrides)
    assert message in str(error.value) and "\n" not in str(error.value)
    assert "runtime.pipeline_parallel" in str(error.value)


@pytest.mark.parametrize("value", ["0", "-1", "two", "true"])
def test_pipeline_parallel_is_auto_or_a_positive_number(value):
    with pytest.raises(ConfigError, match="runtime.pipeline_parallel"):
        to_config(load_config([LIVE, f"runtime.pipeline_parallel={value}"]))
