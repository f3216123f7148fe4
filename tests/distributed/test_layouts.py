"""One ``model=wan_tiny`` video on several CPU ranks (gloo, one thread each), its work split: the DiT's tokens over
the ranks (Ulysses), a step's guidance passes over the ranks, and both; N and I chunks, token counts that the rank
counts do not divide (tests/distributed/layout_renders.py); and the bundled model with its A2V's tokens split. Each
layout's frames against the single-process render.

Measured on this machine (x86 AVX-512 kernels, fp32, one thread a rank): the DiT's latents and the frames of every
layout below equal the single-process ones exactly (max |difference| 0.0). Ulysses computes each head's attention over
the same keys as one process, and a guidance pass runs whole on one rank; only a kernel that blocks a matmul by its
row count (a rank multiplies fewer token rows) could round a sum otherwise: the tolerance is for those (GPUs, more
threads). And a render of such a layout stopped by SIGINT resumes, under torchrun, to the uninterrupted frames.

A conversation (a source video dubbed with two speakers, MultiTalk's routing) splits the same ways: every rank reads
the source video and the speakers' files itself, and the routing's attention map, averaged over all heads, is summed
over the ranks' head shards by one all-reduce (2 ranks: 1 head each; 3 ranks: the third holds only a padding head).
Measured: latents and frames equal to the single process's exactly (max |difference| 0.0) on 2 and 3 ranks.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.conftest import FAST, REPO, write_speechlike_wav
from tests.distributed.layout_renders import SOURCE, SPEAKER_FILES, render_layout, write_conversation
from tests.distributed.torchrun import torchrun
from tests.ffmpeg_probe import decode_frames, probe

LATENT_TOLERANCE = 1e-5  # fp32 max |difference| of the DiT's latents (values of order 1); measured: 0.0
FRAME_TOLERANCE = 1  # grey levels: a latent differing in its last bits may round a pixel the other way; measured: 0


@pytest.fixture(scope="module")
def single() -> dict:
    return render_layout("single")


@pytest.fixture(scope="module")
def conversation(tmp_path_factory) -> tuple:
    """The conversation's files and its single-process render."""
    folder = tmp_path_factory.mktemp("conversation")
    write_conversation(folder)
    return folder, render_layout("conversation_single", folder)


def _with_conversation(tmp_path, conversation) -> dict:
    """The conversation's files copied where the ranks read them (their OUT folder); its single-process render."""
    folder, single = conversation
    for name in (SOURCE, *SPEAKER_FILES):
        shutil.copy(folder / name, tmp_path / name)
    return single


def _compare(tmp_path, single: dict, layout: str, expected: dict, shape: tuple = (15, 80, 80, 3)) -> None:
    result = np.load(tmp_path / f"{layout}.npz")
    assert json.loads(str(result["layout"])) == expected
    assert result["frames"].shape == single["frames"].shape == shape
    latents = float(np.abs(result["latents"] - single["latents"]).max())
    frames = int(np.abs(result["frames"].astype(int) - single["frames"]).max())
    assert latents <= LATENT_TOLERANCE, f"{layout}: latents differ by {latents}"
    assert frames <= FRAME_TOLERANCE, f"{layout}: frames differ by {frames} grey levels"


def _run(tmp_path, nproc: int, *layouts: str) -> None:
    result = torchrun(str(tmp_path), *layouts, nproc=nproc, module="tests.distributed.layout_renders", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]


def test_two_ranks_split_the_tokens_or_the_guidance_passes_and_keep_the_frames(tmp_path, single, conversation):
    conversation_single = _with_conversation(tmp_path, conversation)
    _run(tmp_path, 2, "sequence", "guidance", "bundled_sequence", "conversation_sequence")
    # 100 tokens a clip, 125 a seam window: the odd count is padded and masked
    _compare(tmp_path, single, "sequence",
             {"world": 2, "guidance": 1, "sequence": 2, "replicas": 1, "weights": "fsdp over 2 ranks"})  # fmt: skip
    # three passes a step on two ranks: two on rank 0, one on rank 1; no weight to share, each rank holds the DiT
    _compare(tmp_path, single, "guidance",
             {"world": 2, "guidance": 2, "sequence": 1, "replicas": 1, "weights": "whole on every rank"})  # fmt: skip
    # the bundled model's A2V on request: 1,216 tokens a window split over the ranks, a window's frames cut
    _compare(tmp_path, render_layout("bundled_single"), "bundled_sequence",
             {"world": 2, "guidance": 1, "sequence": 2, "replicas": 1, "weights": "fsdp over 2 ranks"},
             shape=(15, 256, 256, 3))  # fmt: skip
    # a dub with two speakers: each rank's tokens routed by the map of all heads (one head a rank), the source's
    # frames and the speakers' audio read by each rank
    _compare(tmp_path, conversation_single, "conversation_sequence",
             {"world": 2, "guidance": 1, "sequence": 2, "replicas": 1, "weights": "fsdp over 2 ranks"})  # fmt: skip


@pytest.mark.slow  # a three-rank torchrun of four renders: ~30 s on the shared 2-core machine
def test_three_ranks_split_the_tokens_or_the_guidance_passes_and_keep_the_frames(tmp_path, single, conversation):
    conversation_single = _with_conversation(tmp_path, conversation)
    _run(tmp_path, 3, "sequence", "guidance", "conversation_sequence", "conversation_guidance")
    # 100 and 125 tokens over 3 ranks, 2 heads over 3 ranks: tokens and heads padded
    _compare(tmp_path, single, "sequence",
             {"world": 3, "guidance": 1, "sequence": 3, "replicas": 1, "weights": "fsdp over 3 ranks"})  # fmt: skip
    _compare(tmp_path, single, "guidance",
             {"world": 3, "guidance": 3, "sequence": 1, "replicas": 1, "weights": "whole on every rank"})  # fmt: skip
    # two speakers: the third rank's head shard is only padding (its share of the map: zero)
    _compare(tmp_path, conversation_single, "conversation_sequence",
             {"world": 3, "guidance": 1, "sequence": 3, "replicas": 1, "weights": "fsdp over 3 ranks"})  # fmt: skip
    # a dub's guidance passes on three ranks: each computes its pass with the conditioning it read itself
    _compare(tmp_path, conversation_single, "conversation_guidance",
             {"world": 3, "guidance": 3, "sequence": 1, "replicas": 1, "weights": "whole on every rank"})  # fmt: skip


@pytest.mark.slow  # a four-rank torchrun: ~30 s on the shared 2-core machine
def test_guidance_and_sequence_parallelism_compose_on_four_ranks(tmp_path, single):
    _run(tmp_path, 4, "guidance_x_sequence")
    _compare(tmp_path, single, "guidance_x_sequence",
             {"world": 4, "guidance": 2, "sequence": 2, "replicas": 1,
              "weights": "fsdp over 2 ranks, 2 copies (one per guidance rank)"})  # fmt: skip


@pytest.mark.slow  # three two-rank torchruns: ~80 s on the shared 2-core machine
def test_a_sequence_parallel_render_stopped_by_sigint_resumes_to_the_uninterrupted_frames(tmp_path, face_png):
    audio = write_speechlike_wav(tmp_path / "a.wav", 2.0)
    reference, out = tmp_path / "reference" / "r.mp4", tmp_path / "out" / "o.mp4"
    request = ["render", "-i", str(face_png), "-a", str(audio), "-q", "model=wan_tiny", "model.image_size=80",
               "pipeline.interpolate=true", "output.gop_seconds=0.32", *FAST]  # fmt: skip
    result = torchrun(*request, "-o", str(reference), "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    report = next(json.loads(line) for line in result.stdout.splitlines() if '"parallel"' in line)  # rank 0's
    assert report["parallel"] == {"world": 2, "guidance": 1, "sequence": 2, "replicas": 1, "weights": "fsdp over 2 ranks"}

    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "avatargen",
               *request, "-o", str(out)]  # fmt: skip
    process = subprocess.Popen(command, env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    folder, deadline = out.with_name("o.resume"), time.monotonic() + 180
    try:
        while not list(folder.glob("state-*.safetensors")):  # the first resume point
            assert process.poll() is None, "the render ended before it could be stopped"
            assert time.monotonic() < deadline
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)  # to torchrun, which passes it on to both ranks
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert "interrupted by SIGINT" in stderr, stderr[-3000:]
    assert 0 < probe(out.with_name("o.partial.mp4"))["frames"] < 50
    result = torchrun(*request, "-o", str(out), "--resume")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "rendering from the start" not in result.stderr  # it continued from rank 0's resume point
    assert sorted(p.name for p in out.parent.iterdir()) == ["o.mp4", "o.yaml"]  # rank 0 writes alone
    assert probe(out)["frames"] == 50
    assert np.array_equal(decode_frames(out), decode_frames(reference)), "resumed frames differ from an uninterrupted render"


@pytest.mark.slow  # a two-rank torchrun: ~25 s on the shared 2-core machine
def test_a_rank_failing_inside_the_token_exchange_stops_the_group_with_one_line_from_rank_0(tmp_path, face_png):
    audio = write_speechlike_wav(tmp_path / "a.wav", 1.0)
    out = tmp_path / "o.mp4"
    result = torchrun("1", "render", "-i", str(face_png), "-a", str(audio), "-o", str(out), "-q", "model=wan_tiny",
                      *FAST, "runtime.dist_timeout_s=60", module="tests.distributed.faulty_rank", timeout=150)  # fmt: skip
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.startswith("error: rank 1 of 2 failed")]
    assert len(lines) == 1, result.stderr[-3000:]  # rank 0, waiting in an all-to-all of rank 1's tokens, names it
    assert "test fault on rank 1" in lines[0]
    assert not out.exists()
