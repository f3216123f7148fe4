"""Offload policies: ``runtime.offload=block`` streams the DiTs' blocks through the device without changing a bit.

On CPU the copies are no-ops, but the hooks and their bookkeeping run exactly as on CUDA: these tests check what a
user relies on (same frames, bounded resident blocks, prefetch ahead of compute, the report) from that bookkeeping.
"""

from __future__ import annotations

import json

import pytest
import torch

from avatargen.config import load_config, to_config
from avatargen.models.structure import model_blocks
from avatargen.modules import Module, PlacementPlan
from avatargen.families.tiny.build import module_specs
from avatargen.runtime.offload import OffloadMonitor
from avatargen.families.tiny.stages.a2v import A2VStage
from avatargen.families.tiny.stages.context import ReferenceContext
from tests.conftest import run_cli, write_face_png, write_speechlike_wav
from tests.ffmpeg_probe import decode_frames

CPU = torch.device("cpu")
FRAMES = 3  # latent frames of the A2V test window


@pytest.fixture(scope="module")
def specs():
    return {spec.name: spec for spec in module_specs(to_config(load_config()))}


@pytest.fixture(scope="module")
def trained_like(specs):
    """The tiny A2V and SR models with every weight perturbed: a fresh init is adaLN-Zero / zero-head, whose blocks
    do not change the output, which would make "same output" vacuous."""
    models = {}
    for name in ("a2v", "sr"):
        torch.manual_seed(0)
        model = specs[name].build()
        with torch.no_grad():
            for param in model.parameters():
                param.add_(torch.randn_like(param) * 0.05)
        models[name] = model
    return models


def inputs(name: str) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(1)
    if name == "sr":
        return torch.randn(2, 8, 16, 16, generator=g), torch.randn(2, 8, 32, 32, generator=g)  # low, ref_high
    x_t, given = torch.randn(1, 8, FRAMES, 16, 16, generator=g), torch.randn(1, 8, FRAMES, 16, 16, generator=g)
    given_mask = torch.tensor([[True] + [False] * (FRAMES - 1)])
    ref = torch.randn(1, 8, 16, 16, generator=g)
    audio, text = torch.randn(1, FRAMES, 128, generator=g), torch.randn(1, 128, generator=g)
    return x_t, torch.tensor([0.5]), given, given_mask, ref, audio, text


def placed(specs, trained_like, name: str, offload: str, resident_blocks: int = 2) -> Module:
    monitor = OffloadMonitor(offload, resident_blocks, CPU, trace=True)
    plan = PlacementPlan(offload, CPU, resident_blocks=resident_blocks)
    return Module.from_state_dict(specs[name], trained_like[name].state_dict(), plan, monitor)


def run(module: Module, name: str, forwards: int = 3) -> list[torch.Tensor]:
    """``forwards`` calls in one stage visit, as the sampling steps (A2V) or frame batches (SR) make them."""
    with torch.inference_mode(), module.active() as model:
        return [model(*inputs(name)) for _ in range(forwards)]


def replay(trace: list[tuple[str, str, int | None]], resident_blocks: int, blocks: int) -> list[int]:
    """Walk a trace checking every compute found its block resident and never more than ``resident_blocks`` were;
    returns the computed block indices in order."""
    resident: set[int] = set()
    computed = []
    for event, _, block in trace:
        if block is None or event == "waited":  # the rest group (embeddings, heads); a wait for a released block
            continue
        if event == "load":
            resident.add(block)
            assert len(resident) <= resident_blocks
        elif event == "evict":
            resident.discard(block)
        else:
            assert block in resident, f"block {block} computed before it was loaded"
            if resident_blocks >= 2 and blocks > 1:  # the next block (wrapping to 0) is already on its way
                following = (block + 1) % blocks
                assert following in resident, f"block {following} not prefetched before block {block} computes"
            computed.append(block)
    assert not resident, "leaving the stage must drop every block"
    return computed


@pytest.mark.parametrize("name", ["a2v", "sr"])
def test_block_offload_gives_the_same_outputs_bit_for_bit(specs, trained_like, name):
    resident = run(placed(specs, trained_like, name, "none"), name)
    module = placed(specs, trained_like, name, "block")
    streamed = run(module, name)
    assert all(torch.equal(a, b) for a, b in zip(resident, streamed))
    assert resident[0].abs().mean() > 0.1  # the blocks really shape the output
    blocks = len(model_blocks(module.model))
    assert blocks == {"a2v": 4, "sr": 5}[name]  # SR: blocks then face_blocks
    report = module.monitor.report()
    assert report["loads"] == 1 + 3 * blocks + 1  # rest group, each block per forward, block 0 wrapped around once more
    assert report["evictions"] == report["loads"] and report["h2d_bytes"] == 0 and report["h2d_gbps"] is None


@pytest.mark.parametrize("resident_blocks", [1, 2, 3, 5, 8])
def test_resident_blocks_bound_what_is_on_the_device(specs, trained_like, resident_blocks):
    module = placed(specs, trained_like, "sr", "block", resident_blocks)  # 5 blocks
    run(module, "sr", forwards=2)
    computed = replay(module.monitor.trace, resident_blocks, 5)
    assert computed == list(range(5)) * 2
    assert module.monitor.report()["max_resident_blocks"] == min(resident_blocks, 5)
    if resident_blocks >= 5:  # every block fits: each is copied once per stage visit, not once per forward
        assert module.monitor.loads == 1 + 5


def test_prefetch_runs_one_block_ahead_and_wraps_across_sampling_steps(specs, trained_like):
    module = placed(specs, trained_like, "a2v", "block", resident_blocks=2)
    reference = ReferenceContext(ref_low=inputs("a2v")[4], ref_high=torch.zeros(1, 8, 32, 32), text=inputs("a2v")[6])
    x, _, given, mask, _, audio, _ = inputs("a2v")
    A2VStage(module, shift=1.0).generate(reference, audio, given, mask, x, steps=3)
    trace = [(event, block) for event, _, block in module.monitor.trace]
    assert trace[:3] == [("load", None), ("load", 0), ("load", 1)]  # entry: rest group and block 0, then block 1
    computes = [i for i, (event, _) in enumerate(trace) if event == "compute"]
    assert [trace[i][1] for i in computes] == [0, 1, 2, 3] * 3
    for position, at in enumerate(computes):
        # Block n+1 is requested just before block n computes: after block n-1's compute, not earlier.
        block = trace[at][1]
        since = computes[position - 1] if position else 0
        assert ("load", (block + 1) % 4) in trace[since:at], (position, trace[since:at])
    assert trace[computes[3] - 1] == ("load", 0)  # after the last block of step 1, block 0 again for step 2
    assert trace[-2:] == [("evict", 0), ("evict", None)]  # the last wrap-around is dropped on exit, nothing copied back
    replay(module.monitor.trace, 2, 4)


def test_whole_model_offload(specs, trained_like):
    module = placed(specs, trained_like, "a2v", "model")
    run(module, "a2v", forwards=1)
    run(module, "a2v", forwards=1)
    report = module.monitor.report()
    assert (report["loads"], report["switches"], report["max_resident_blocks"]) == (2, 2, None)


def test_the_host_waits_for_block_n_minus_2_before_copying_block_n_plus_1(specs, trained_like):
    """On a GPU the host runs ahead; it must wait for an old block's kernels before reusing memory, but for block
    n-2's, not n-1's: n-1 may still compute while n's kernels and n+1's copy are queued (no idle GPU between blocks)."""
    module = placed(specs, trained_like, "sr", "block", resident_blocks=2)  # 5 blocks
    run(module, "sr", forwards=2)
    trace = [(event, block) for event, _, block in module.monitor.trace if block is not None]
    checked = 0
    for at, (event, block) in enumerate(trace):
        if event != "load" or block is None:
            continue
        waits = [b for e, b in trace[:at] if e == "waited"]
        computes = [b for e, b in trace[:at] if e == "compute"]
        if len(computes) >= 3:  # block n+1 is loaded before block n computes: n-1 done computing, n-2 waited for
            n_minus_1 = computes[-1]
            assert waits and waits[-1] == computes[-2], (block, waits[-3:], computes[-3:])
            assert n_minus_1 not in waits[-1:], "the host must not wait for the block that computed last"
            checked += 1
    assert checked >= 5


def test_each_block_is_one_flat_host_buffer(specs, trained_like):
    module = placed(specs, trained_like, "a2v", "block")
    placement = module.placement
    blocks = model_blocks(module.model)
    assert len(placement.blocks) == len(blocks) == 4
    for group, block in zip(placement.blocks, blocks):
        tensors = [*block.parameters(), *block.buffers()]
        assert len(group.tensors) == len(tensors) > 1
        flat = group.host_flat
        for tensor in tensors:  # every weight of the block is a view into its one buffer
            assert tensor.untyped_storage().data_ptr() == flat.untyped_storage().data_ptr()
        weight_bytes = sum(t.numel() * t.element_size() for t in tensors)
        assert weight_bytes <= flat.numel() <= weight_bytes + 256 * len(tensors)  # only alignment padding


def test_render_with_block_offload_writes_the_same_frames_and_reports_it(tmp_path):
    image, audio = write_face_png(tmp_path / "face.png"), write_speechlike_wav(tmp_path / "a.wav", 1.2)
    outputs, reports = {}, {}
    for policy in ("none", "block"):
        out = tmp_path / f"{policy}.mp4"
        cold = {"XDG_CACHE_HOME": str(tmp_path / f"cache-{policy}")}  # both encode the reference: as many switches
        result = run_cli("render", "-i", str(image), "-a", str(audio), "-o", str(out), "--json", "-q",
                         "runtime.device=cpu", "runtime.threads=1", "pipeline.n_chunk_frames=12",
                         f"runtime.offload={policy}",
                         "runtime.overlap=false",  # overlap adds stage entries when its thread lags
                         env_extra=cold)  # fmt: skip
        assert result.returncode == 0, result.stderr
        outputs[policy], reports[policy] = decode_frames(out), json.loads(result.stdout)["offload"]
    assert outputs["none"].shape[0] == 30 and (outputs["none"] == outputs["block"]).all()
    block = reports["block"]
    assert set(block) == {"policy", "resident_blocks", "switches", "switch_ms_mean", "switch_ms_max", "h2d_bytes",
                          "h2d_gbps", "loads", "evictions", "max_resident_blocks", "peak_device_mb",
                          "pinned_host_mb"}  # fmt: skip
    assert (block["policy"], block["resident_blocks"], block["max_resident_blocks"]) == ("block", 2, 2)
    assert block["switches"] > 10 and block["switch_ms_max"] >= block["switch_ms_mean"] >= 0
    assert block["loads"] > block["switches"] and block["evictions"] == block["loads"]
    assert (block["h2d_bytes"], block["h2d_gbps"], block["peak_device_mb"]) == (0, None, None)  # CPU: nothing copied
    assert block["pinned_host_mb"] is None  # nor pinned
    none = reports["none"]
    assert (none["policy"], none["loads"], none["max_resident_blocks"]) == ("none", 0, None)
    assert none["switches"] == block["switches"]


def test_zero_resident_blocks_is_a_one_line_config_error(tmp_path):
    image, audio = write_face_png(tmp_path / "face.png"), write_speechlike_wav(tmp_path / "a.wav", 0.5)
    result = run_cli("render", "-i", str(image), "-a", str(audio), "-o", str(tmp_path / "o.mp4"),
                     "runtime.offload=block", "runtime.offload_resident_blocks=0")  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip() == "error: runtime.offload_resident_blocks must be >= 1 (blocks on the device at once)"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (benchmarks/gpu/gpu_checks.sh runs it)")
@pytest.mark.parametrize("name", ["a2v", "sr"])
def test_cuda_block_offload_is_exact_and_bounds_device_memory(specs, trained_like, name):
    cuda = torch.device("cuda")
    model = trained_like[name]
    block_bytes = max(sum(t.numel() * t.element_size() for t in b.parameters()) for b in model_blocks(model))
    outputs, peaks = {}, {}
    for policy in ("none", "block"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(cuda)
        before = torch.cuda.memory_allocated(cuda)
        module = Module.from_state_dict(specs[name], model.state_dict(), PlacementPlan(policy, cuda, resident_blocks=2))
        with torch.inference_mode(), module.active() as placed_model:
            args = [a.to(cuda) for a in inputs(name)]
            outputs[policy] = [placed_model(*args).cpu() for _ in range(3)]
        torch.cuda.synchronize(cuda)
        peaks[policy] = torch.cuda.max_memory_allocated(cuda) - before
        if policy == "block":  # flat host buffers, page-locked byte for byte (no power-of-two rounding)
            weights = sum(t.numel() * t.element_size() for t in [*placed_model.parameters(), *placed_model.buffers()])
            assert all(group.host_flat.is_pinned() for group in [module.placement.rest, *module.placement.blocks])
            assert weights <= module.monitor.pinned_bytes <= 1.05 * weights, (module.monitor.pinned_bytes, weights)
        del module, placed_model
    for a, b in zip(outputs["none"], outputs["block"]):
        assert torch.equal(a, b)  # the same kernels on the same weights: copies change nothing
    blocks = len(model_blocks(model))
    # Resident: every block; block: 2 resident + the one whose kernels may still run.
    assert peaks["block"] <= peaks["none"] - (blocks - 3) * block_bytes, (peaks, block_bytes, blocks)
