"""A model set whose weights cannot fit where they go is refused before any weight is allocated."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from avatargen.errors import ConfigError
from avatargen.runtime.memory import _room_in, host_available_bytes
from avatargen.runtime.memory_fit import GIB, WeightsShare, check_weights_fit, weights_share
from avatargen.runtime.placement import PlacementPlan
from tests.conftest import run_cli, write_speechlike_wav

CUDA = torch.device("cuda", 0)


def _meta_linear() -> nn.Module:
    with torch.device("meta"):
        model = nn.Linear(1024, 1024)  # 1,049,600 parameters
    model.register_buffer("table", torch.zeros(256, dtype=torch.int64, device="meta"))
    return model


def test_a_share_counts_the_run_dtype_its_home_and_an_fsdp_ranks_part():
    model, params = _meta_linear(), 1024 * 1024 + 1024
    host = weights_share("dit", model, PlacementPlan("none", torch.device("cpu"), dtype=torch.bfloat16), 1)
    assert (host.home, host.nbytes) == ("host", params * 2 + 256 * 8)  # buffers keep their own dtype
    assert weights_share("dit", model, PlacementPlan("none", CUDA), 1).home == "device"
    assert weights_share("dit", model, PlacementPlan("block", CUDA), 1).home == "host"  # offloaded: pinned host
    shard = weights_share("dit", model, PlacementPlan("fsdp", CUDA, dtype=torch.bfloat16), 4)
    assert (shard.home, shard.nbytes) == ("device", -(-(params * 2 + 256 * 8) // 4))
    assert weights_share("dit", model, PlacementPlan("fsdp", CUDA, fsdp_host_offload=True), 4).home == "host"


def test_weights_over_the_free_memory_are_refused_naming_the_biggest_models_and_a_fix():
    shares = [WeightsShare("dit", "host", 30 * GIB, torch.bfloat16),
              WeightsShare("vae", "host", GIB // 2, torch.float32),
              WeightsShare("text_encoder", "device", 10 * GIB, torch.bfloat16)]
    check_weights_fit(shares, CUDA, host=31 * GIB, free_on_device=11 * GIB)  # fits: no error
    with pytest.raises(ConfigError) as caught:
        check_weights_fit(shares, torch.device("cpu"), host=20 * GIB, free_on_device=None)
    assert str(caught.value) == ("the model's weights need 30.5 GiB of host memory (dit 30.0 GiB in bfloat16, vae 512 "
                                 "MiB in float32) and 20.0 GiB is free: free memory, choose a smaller model, or render "
                                 "on GPUs (docs/distributed.md)")
    with pytest.raises(ConfigError, match=r"need 512 MiB of host memory \(runtime.offload keeps the weights there\) "
                                          r"\(vae 512 MiB in float32\) and 100 MiB is free: runtime.offload=none"):
        check_weights_fit(shares[1:2], CUDA, host=100 * 2**20, free_on_device=11 * GIB)
    with pytest.raises(ConfigError, match="of cuda:0's memory .* runtime.offload=block keeps idle weights"):
        check_weights_fit(shares, CUDA, host=64 * GIB, free_on_device=8 * GIB)


def test_a_full_size_model_with_random_weights_on_this_cpu_is_refused_in_one_line(tmp_path, face_png):
    # ~14 G parameters (94.7 GiB in float32): the kernel killed such a render at ~24 GB (exit 137, no message)
    available = host_available_bytes()
    if available is None or available > 95 * GIB:
        pytest.skip("this machine's memory would hold the full-size model")
    audio = write_speechlike_wav(tmp_path / "a.wav", 1.0)
    result = run_cli("render", "-i", str(face_png), "-a", str(audio), "-o", str(tmp_path / "big.mp4"), "model=wan_tiny",
                     "model.wan.spec=infinitetalk", "model.weights=random", "runtime.threads=1")  # fmt: skip
    lines = [line for line in result.stderr.splitlines() if not line.startswith("note: model.weights=random")]
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith("error: the model's weights need ") and "GiB of host memory (dit " in lines[0]
    assert not (tmp_path / "big.mp4").exists() and not (tmp_path / "big.partial.mp4").exists()


def test_a_missing_weights_file_is_said_before_the_memory_the_weights_would_need(tmp_path, face_png):
    # the file must be fixed whatever the memory: said first (the memory line hid it on a 24 GB machine)
    available = host_available_bytes()
    if available is None or available > 47 * GIB:
        pytest.skip("this machine's memory would hold InfiniteTalk's weights: the order is not seen")
    (tmp_path / "weights").mkdir()
    audio = write_speechlike_wav(tmp_path / "a.wav", 1.0)
    result = run_cli("render", "-i", str(face_png), "-a", str(audio), "-o", str(tmp_path / "o.mp4"),
                     "model=infinitetalk", f"model.checkpoint={tmp_path / 'weights'}", "runtime.threads=1")
    assert result.returncode == 2 and "does not exist; download the folder" in result.stderr, result.stderr
    assert "GiB of host memory" not in result.stderr


def test_a_containers_page_cache_counts_as_free_and_no_limit_is_no_limit(tmp_path):
    # a container that has read more files than its limit sits at memory.max with page cache the kernel can drop:
    # counting it as used refused the bundled model's 25 MiB with "0.0 GiB is free"
    (tmp_path / "memory.max").write_text(f"{4 * GIB}\n")
    (tmp_path / "memory.current").write_text(f"{4 * GIB - 2 * 2**20}\n")
    (tmp_path / "memory.stat").write_text(f"anon {2**20}\nfile {3 * GIB}\ninactive_file {3 * GIB}\n")
    assert _room_in(tmp_path, "memory.max", "memory.current", "inactive_file") == (3 * GIB + 2 * 2**20,)
    (tmp_path / "memory.max").write_text("max\n")
    assert _room_in(tmp_path, "memory.max", "memory.current", "inactive_file") == (None,)
    assert _room_in(tmp_path / "elsewhere", "memory.max", "memory.current", "inactive_file") is None
