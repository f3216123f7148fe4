"""NUMA placement against a fake sysfs tree: what a rank pins itself to, and that missing information is harmless."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import torch

from avatargen.runtime.distributed import WorldInfo
from avatargen.runtime.numa import choose_cpus, parse_cpulist, pci_numa_node, pin_rank, set_affinity_all_threads

GPU = "0000:17:00.0"


def fake_sysfs(root: Path, nodes: dict[int, str], gpus: dict[str, str]) -> Path:
    for node, cpulist in nodes.items():
        folder = root / "devices" / "system" / "node" / f"node{node}"
        folder.mkdir(parents=True)
        (folder / "cpulist").write_text(cpulist + "\n")
    (root / "devices" / "system" / "node" / "possible").parent.mkdir(parents=True, exist_ok=True)
    (root / "devices" / "system" / "node" / "possible").write_text("0-1\n")  # not a node folder: ignored
    for bus_id, node in gpus.items():
        folder = root / "bus" / "pci" / "devices" / bus_id
        folder.mkdir(parents=True)
        (folder / "numa_node").write_text(node + "\n")
    return root


def test_cpulist_parsing_handles_ranges_singles_strides_and_blanks():
    assert parse_cpulist("0-3,8-11") == [0, 1, 2, 3, 8, 9, 10, 11]
    assert parse_cpulist("5\n") == [5]
    assert parse_cpulist("0-6:2,9") == [0, 2, 4, 6, 9]
    assert parse_cpulist("") == []


def test_a_gpu_rank_takes_the_cpus_of_its_gpus_node(tmp_path):
    sysfs = fake_sysfs(tmp_path, {0: "0-3,8-11", 1: "4-7,12-15"}, {GPU: "1", "0000:65:00.0": "-1"})
    placement = choose_cpus(0, GPU, set(range(16)), sysfs)
    assert placement.cpus == (4, 5, 6, 7, 12, 13, 14, 15) and "node 1" in placement.reason
    # Only CPUs this process may use (a cgroup or taskset may have narrowed them).
    assert choose_cpus(0, GPU, {4, 5, 0}, sysfs).cpus == (4, 5)
    assert pci_numa_node("0000:65:00.0", sysfs) is None  # -1: a board without NUMA information
    assert choose_cpus(0, "0000:65:00.0", set(range(16)), sysfs).cpus == ()
    assert choose_cpus(0, "0000:99:00.0", set(range(16)), sysfs).cpus == ()  # no such device


def test_cpu_ranks_are_spread_over_nodes_by_local_rank(tmp_path):
    sysfs = fake_sysfs(tmp_path, {0: "0-3", 1: "4-7"}, {})
    chosen = [choose_cpus(rank, None, set(range(8)), sysfs).cpus for rank in range(4)]
    assert chosen == [(0, 1, 2, 3), (4, 5, 6, 7), (0, 1, 2, 3), (4, 5, 6, 7)]


def test_no_numa_information_leaves_the_process_alone_and_says_so(tmp_path):
    before = os.sched_getaffinity(0)
    lines: list[str] = []
    placement = pin_rank(WorldInfo(1, 2, 1, 2), torch.device("cpu"), sysfs=tmp_path / "missing", log=lines.append)
    assert placement.cpus == () and os.sched_getaffinity(0) == before
    assert lines == ["rank 1: not pinned (no NUMA information in sysfs)"]


def test_pinning_applies_the_chosen_cpus_and_logs_one_line(tmp_path):
    before = os.sched_getaffinity(0)
    target = min(before)
    sysfs = fake_sysfs(tmp_path, {0: str(target), 1: "1000-1001"}, {})
    lines: list[str] = []
    try:
        placement = pin_rank(WorldInfo(0, 2, 0, 2), torch.device("cpu"), sysfs=sysfs, log=lines.append)
        assert placement.cpus == (target,)
        assert os.sched_getaffinity(0) == {target} or before == {target}
        assert len(lines) == 1 and lines[0].startswith("rank 0: ") and str(target) in lines[0]
    finally:
        os.sched_setaffinity(0, before)


def test_pinning_binds_threads_started_before_it():
    """torch's intra-op pool and the process group start threads; a binding of the calling thread alone would leave
    them on every CPU. Threads that exist when the rank is pinned are bound too."""
    before = os.sched_getaffinity(0)
    if len(before) < 2:
        pytest.skip("needs two CPUs to see a binding change")
    target = (min(before),)
    started, release = threading.Event(), threading.Event()
    ids: list[int] = []

    def worker() -> None:
        ids.append(threading.get_native_id())
        started.set()
        release.wait(10)

    thread = threading.Thread(target=worker)
    thread.start()
    started.wait(10)
    try:
        set_affinity_all_threads(target)
        assert os.sched_getaffinity(ids[0]) == set(target)
        assert os.sched_getaffinity(0) == set(target)
    finally:
        release.set()
        thread.join()
        set_affinity_all_threads(tuple(before))



def test_a_gpu_is_found_from_the_driver_folder_without_cuda(tmp_path):
    from avatargen.runtime.numa import _bus_id_from_driver

    driver = tmp_path / "bus" / "pci" / "drivers" / "nvidia"
    driver.mkdir(parents=True)
    for name in ("0000:9a:00.0", "0000:17:00.0", "bind", "module"):
        (driver / name).mkdir()
    assert _bus_id_from_driver(0, tmp_path) == "0000:17:00.0"
    assert _bus_id_from_driver(1, tmp_path) == "0000:9a:00.0"
    assert _bus_id_from_driver(2, tmp_path) is None and _bus_id_from_driver("GPU-uuid", tmp_path) is None
