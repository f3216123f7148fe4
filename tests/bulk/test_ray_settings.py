"""How many Ray workers a batch starts and what each reserves, from the cluster's resources (no cluster needed:
``ray.cluster_resources()`` is a dict of totals)."""

from __future__ import annotations

import pytest

from avatargen.bulk.ray_driver import gpus_per_worker, worker_count
from avatargen.config.loader import load_config, to_config
from avatargen.errors import BadInputError

GPU_CLUSTER = {"CPU": 64.0, "GPU": 8.0, "memory": 5e11}
CPU_CLUSTER = {"CPU": 16.0, "memory": 5e10}


def _config(*overrides: str):
    return to_config(load_config(list(overrides)))


def test_workers_on_a_gpu_cluster_reserve_a_gpu_each_unless_told_otherwise():
    # with none reserved, Ray empties a worker's CUDA_VISIBLE_DEVICES: a GPU cluster rendered on its CPUs
    config = _config()
    assert gpus_per_worker(config, GPU_CLUSTER) == 1.0 and worker_count(config, GPU_CLUSTER, 1.0) == 8
    assert gpus_per_worker(config, CPU_CLUSTER) == 0.0 and worker_count(config, CPU_CLUSTER, 0.0) == 16
    assert gpus_per_worker(_config("runtime.device=cpu"), GPU_CLUSTER) == 0.0
    assert gpus_per_worker(_config("batch.ray.num_gpus=0.5"), GPU_CLUSTER) == 0.5
    assert worker_count(_config("batch.ray.num_gpus=0.5"), GPU_CLUSTER, 0.5) == 16
    assert worker_count(_config("batch.ray.num_cpus=16"), GPU_CLUSTER, 1.0) == 4  # the scarcer resource decides


def test_workers_that_would_reserve_nothing_are_refused_in_one_line():
    # num_gpus=null resolves to 0 here: 'min() arg is an empty sequence', exit 1
    config = _config("batch.ray.num_cpus=0")
    with pytest.raises(BadInputError, match="batch.ray.num_cpus=0 and the workers reserve no GPU"):
        worker_count(config, CPU_CLUSTER, gpus_per_worker(config, CPU_CLUSTER))
    assert worker_count(config, GPU_CLUSTER, gpus_per_worker(config, GPU_CLUSTER)) == 8


def test_a_cluster_too_small_for_one_worker_is_one_line_naming_the_keys():
    config = _config("batch.ray.num_gpus=2")
    with pytest.raises(BadInputError, match=r"the Ray cluster has 16 CPUs and 0 GPUs: not enough for one worker of "
                                            r"batch.ray.num_cpus=1, batch.ray.num_gpus=2; add nodes or lower them"):
        worker_count(config, CPU_CLUSTER, gpus_per_worker(config, CPU_CLUSTER))
