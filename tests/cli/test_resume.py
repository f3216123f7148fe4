"""Signals and --resume through the real CLI: a stopped or killed render continues from its last checkpoint, and the
joined video is exactly the uninterrupted one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import FAST, REPO, kill_tree, run_cli, write_speechlike_wav
from tests.ffmpeg_probe import decode_frames, header_duration_s, png_frame_count, probe, stream_start_times

SECONDS = 5.0
FRAMES = 125
# The stopped and resumed renders emit on a second thread (a default render on 2 cores does); one thread per step
# either way, so their frames are the inline reference's bit for bit.
OVERLAPPED = [*FAST, "runtime.overlap=true"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> tuple[Path, Path, Path]:
    """Image, audio and the uninterrupted render of them (made once for the module)."""
    from tests.conftest import write_face_png

    folder = tmp_path_factory.mktemp("resume")
    face, audio = write_face_png(folder / "face.png"), write_speechlike_wav(folder / "a.wav", SECONDS)
    reference = folder / "reference.mp4"
    result = run_cli("render", "-i", str(face), "-a", str(audio), "-o", str(reference), "-q", *FAST)
    assert result.returncode == 0, result.stderr
    return face, audio, reference


def _start(face: Path, audio: Path, out: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "avatargen", "render", "-i", str(face), "-a", str(audio), "-o", str(out), "-q", *OVERLAPPED, *extra]
    return subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_checkpoints(process: subprocess.Popen, out: Path, count: int) -> None:
    folder = out.with_name(f"{out.stem}.resume")
    deadline = time.monotonic() + 120
    while len(list(folder.glob("state-*.safetensors"))) < count:
        assert process.poll() is None, "the render ended before it could be stopped"
        assert time.monotonic() < deadline
        time.sleep(0.05)


def _interrupt_after_a_checkpoint(face: Path, audio: Path, out: Path) -> None:
    """Start a render of ``out``, SIGINT it once its first resume checkpoint is on disk, and let it exit."""
    process = _start(face, audio, out)
    _wait_for_checkpoints(process, out, 1)
    process.send_signal(signal.SIGINT)
    process.communicate(timeout=120)


def _resume(face: Path, audio: Path, out: Path) -> None:
    result = run_cli("render", "-i", str(face), "-a", str(audio), "-o", str(out), "-q", *OVERLAPPED, "--resume")
    assert result.returncode == 0, result.stderr
    assert not out.with_name(f"{out.stem}.resume").exists() and not out.with_name(f"{out.stem}.partial.mp4").exists()


def _assert_same_video(out: Path, reference: Path) -> None:
    info = probe(out)
    assert (info["video_codec"], info["audio_codec"], info["frames"]) == ("h264", "aac", FRAMES)
    assert abs(info["video_duration_s"] - info["audio_duration_s"]) <= 1 / 25 + 1e-3
    assert np.array_equal(decode_frames(out), decode_frames(reference)), "resumed frames differ from an uninterrupted render"
    # A plain `ffmpeg -i OUT.mp4 d/%04d.png` gives exactly the frames rendered (no stream starts before 0), and the
    # finished file's header carries its duration, for the uninterrupted render and the resumed one.
    for video in (out, reference):
        assert png_frame_count(video, video.with_name(f"{video.stem}-png")) == FRAMES
        assert stream_start_times(video) == {"video": 0.0, "audio": 0.0}
        assert abs(header_duration_s(video) - FRAMES / 25) <= 0.05


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), pytest.param(signal.SIGTERM, 143, marks=pytest.mark.slow)])
def test_signal_closes_a_trimmed_partial_says_how_to_resume_and_resume_is_exact(tmp_path, inputs, sig, code):
    face, audio, reference = inputs
    out = tmp_path / "o.mp4"
    process = _start(face, audio, out)
    _wait_for_checkpoints(process, out, 1)
    process.send_signal(sig)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == code, stderr
    lines = [line for line in stderr.strip().splitlines() if not line.startswith("note:")]
    assert len(lines) == 1 and "Traceback" not in stderr
    partial = out.with_name("o.partial.mp4")
    assert f"'{partial}'" in lines[0] and lines[0].endswith("--resume") and "avatargen render" in lines[0]
    assert not out.exists()
    info = probe(partial)
    assert 0 < info["frames"] < FRAMES
    # The audio is cut with the video: at most an AAC frame (21 ms) apart, not the rest of the input.
    assert abs(info["audio_duration_s"] - info["video_duration_s"]) <= 1 / 25
    # and both start at 0: a plain `ffmpeg -i o.partial.mp4 d/%04d.png` gives exactly its frames
    assert stream_start_times(partial) == {"video": 0.0, "audio": 0.0}
    assert png_frame_count(partial, tmp_path / "png") == info["frames"]
    _resume(face, audio, out)
    _assert_same_video(out, reference)


@pytest.mark.slow
def test_sigkill_then_resume_twice_is_exact(tmp_path, inputs):
    face, audio, reference = inputs
    out = tmp_path / "o.mp4"
    for checkpoints in (1, 2):  # kill the first run, then kill the resumed run too
        process = _start(face, audio, out, *(["--resume"] if checkpoints > 1 else []))
        _wait_for_checkpoints(process, out, checkpoints)
        kill_tree(process.pid)  # everything at once, ffmpeg included
        process.communicate()
        assert not out.exists()
    _resume(face, audio, out)
    _assert_same_video(out, reference)


def test_resume_with_other_inputs_or_config_is_refused(tmp_path, inputs):
    face, audio, _ = inputs
    out = tmp_path / "o.mp4"
    _interrupt_after_a_checkpoint(face, audio, out)
    other = write_speechlike_wav(tmp_path / "other.wav", 4.0)
    result = run_cli("render", "-i", str(face), "-a", str(other), "-o", str(out), "-q", *OVERLAPPED, "seed=3", "--resume")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "cannot resume" in result.stderr and "the audio and config differ from the stopped render" in result.stderr
    assert "(seed was 0, is 3)" in result.stderr, "the changed config key is named"
    assert out.with_name("o.resume").is_dir(), "a refused resume keeps the state for the right command"


def test_resume_never_splices_another_video_found_at_the_partial_name(tmp_path, inputs):
    """Any avatargen MP4 at OUT.partial.mp4 used to be spliced in as the stopped run's video (62 of 71 frames wrong)."""
    face, audio, reference = inputs
    out = tmp_path / "o.mp4"
    _interrupt_after_a_checkpoint(face, audio, out)
    partial = out.with_name("o.partial.mp4")
    partial.write_bytes(reference.read_bytes())  # another render's video, copied over the stopped run's
    result = run_cli("render", "-i", str(face), "-a", str(audio), "-o", str(out), "-q", *OVERLAPPED, "--resume")
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("note:")]
    assert result.returncode == 2 and len(lines) == 1 and "is not the video of its stopped render" in lines[0], result.stderr
    assert partial.read_bytes() == reference.read_bytes() and out.with_name("o.resume").is_dir() and not out.exists()


def test_a_damaged_resume_state_with_finite_values_is_one_line_exit_2(tmp_path, inputs):
    """A state file whose values were changed but stay finite used to reach the model: exit 1 (an unexpected
    RuntimeError) or a garbled video."""
    from safetensors.torch import load_file, save_file

    face, audio, _ = inputs
    out = tmp_path / "o.mp4"
    _interrupt_after_a_checkpoint(face, audio, out)
    for state in out.with_name("o.resume").glob("state-*.safetensors"):
        tensors = load_file(state)
        save_file({name: t * 1e30 if t.is_floating_point() else t for name, t in tensors.items()}, state)
    result = run_cli("render", "-i", str(face), "-a", str(audio), "-o", str(out), "-q", *OVERLAPPED, "--resume")
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("note:")]
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "is damaged" in lines[0] and "without --resume" in lines[0] and not out.exists(), lines


def test_resume_with_nothing_to_resume_renders_from_the_start(tmp_path, inputs):
    face, _, _ = inputs
    audio = write_speechlike_wav(tmp_path / "short.wav", 0.4)
    out = tmp_path / "o.mp4"
    result = run_cli("render", "-i", str(face), "-a", str(audio), "-o", str(out), "-q", *OVERLAPPED, "--resume")
    assert result.returncode == 0, result.stderr
    assert "rendering from the start" in result.stderr and probe(out)["frames"] == 10


@pytest.mark.slow
def test_a_decoder_killed_during_a_resumed_render_keeps_every_part_and_resume_is_still_exact(tmp_path, inputs):
    from tests.cli.test_never_lose_work import _ffmpeg_child

    face, audio, reference = inputs
    out = tmp_path / "o.mp4"
    _interrupt_after_a_checkpoint(face, audio, out)
    resumed = _start(face, audio, out, "--resume")
    parts, deadline = out.with_name("o.resume"), time.monotonic() + 120
    # Once the first run's partial is a part and before the audio is read past what the pipe holds, the decoder is
    # alive. (Waiting for the new partial's first bytes raced the decoder's own end on 5 s of audio.)
    while not (list(parts.glob("part-*.mp4")) and (decoder := _ffmpeg_child(resumed, "f32le"))):
        assert resumed.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(decoder, signal.SIGKILL)  # the audio decoder, mid-render
    _, stderr = resumed.communicate(timeout=120)
    assert resumed.returncode == 1, stderr
    lines = [line for line in stderr.strip().splitlines() if not line.startswith("note:")]
    assert len(lines) == 1 and "killed by SIGKILL" in lines[0] and lines[0].endswith("--resume"), stderr
    assert list(parts.glob("part-*.mp4")), "the first run's part must survive"
    _resume(face, audio, out)
    _assert_same_video(out, reference)


def test_the_fingerprint_covers_every_config_key_but_those_that_cannot_change_a_pixel(inputs):
    import copy

    import torch
    from omegaconf import OmegaConf

    from avatargen.config.loader import load_config
    from avatargen.resume import NOT_FINGERPRINTED, NOT_FINGERPRINTED_SECTIONS, fingerprint, fingerprinted_settings

    face, audio, _ = inputs
    base = load_config([*FAST, "+meta.tag=demo"])
    tree = OmegaConf.to_container(base, resolve=True, enum_to_str=True)

    def digest(tree: dict, device: str = "cpu", dtype: str = "float32") -> str:
        settings = fingerprinted_settings(OmegaConf.create(tree), torch.device(device), dtype)
        return fingerprint(face, audio, "", settings, [])["config"]

    def leaves(node: dict, prefix: str = "") -> list[str]:
        return [found for key, value in node.items()
                for found in (leaves(value, f"{prefix}{key}.") if isinstance(value, dict) else [f"{prefix}{key}"])]  # fmt: skip

    reference = digest(tree)
    resolved_here = {"runtime.device", "runtime.threads", "runtime.dtype"}  # replaced by what this process resolved
    for key in leaves(tree):
        changed = copy.deepcopy(tree)
        *sections, leaf = key.split(".")
        node = changed
        for section in sections:
            node = node[section]
        node[leaf] = ["another value"]
        unseen = key in NOT_FINGERPRINTED or key in resolved_here or key.split(".")[0] in NOT_FINGERPRINTED_SECTIONS
        assert (digest(changed) != reference) == (not unseen), key
    assert digest(tree, device="meta") != reference
    assert digest(tree, dtype="bfloat16") != reference  # runtime.dtype=auto resolved otherwise (another machine)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads + 1)  # the same config, another effective thread count: other float sums
        assert digest(tree) != reference
    finally:
        torch.set_num_threads(threads)


def test_a_layout_that_splits_the_work_is_in_the_fingerprint_fsdp_alone_is_not(inputs):
    import torch

    from avatargen.config.loader import load_config
    from avatargen.resume import fingerprint, fingerprinted_settings
    from avatargen.runtime.layout import ParallelLayout

    face, audio, _ = inputs
    cfg = load_config(FAST)

    def digest(layout: ParallelLayout | None) -> str:
        return fingerprint(face, audio, "", fingerprinted_settings(cfg, torch.device("cpu"), "float32", layout), [])["config"]

    alone = digest(None)
    assert digest(ParallelLayout(world=4, sharded=True)) == alone  # FSDP only: resumable in one process (same threads)
    split = {digest(ParallelLayout(4, 1, 4, True)), digest(ParallelLayout(4, 2, 2, True)), digest(ParallelLayout(4, 2, 1, True))}
    assert len(split) == 3 and alone not in split  # another split: other float sums, so another render
