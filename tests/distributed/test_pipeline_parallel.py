"""Timestep-forcing pipeline parallelism (avatargen/runtime/pipeline_parallel.py): the steps of a causal few-step
denoiser spread over torchrun ranks (gloo, CPU) give the single process's blocks exactly, in order."""

from __future__ import annotations

import json

import pytest

from avatargen.runtime.pipeline_parallel import StepLayout
from tests.distributed.torchrun import torchrun


@pytest.mark.parametrize("steps, stages, groups", [(4, 1, [[0, 1, 2, 3]]), (4, 2, [[0, 1], [2, 3]]),
                                                   (4, 4, [[0], [1], [2], [3]]), (4, 3, [[0, 1], [2], [3]])])  # fmt: skip
def test_each_stage_owns_a_contiguous_group_of_steps(steps, stages, groups):
    assert [list(StepLayout(steps, stages).steps_of(stage)) for stage in range(stages)] == groups


def test_more_stages_than_steps_is_refused():
    with pytest.raises(ValueError, match="5 pipeline stages for 4 denoising steps"):
        StepLayout(4, 5)


@pytest.mark.parametrize("nproc", [2, 4])
def test_blocks_through_the_pipeline_are_the_single_process_blocks(nproc):
    result = torchrun("--blocks", "7", "--steps", "4", nproc=nproc, module="tests.distributed.pipeline_toy", timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["ranks"] == nproc and report["blocks"] == list(range(7)) and report["equal"] is True
