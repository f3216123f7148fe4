"""`avatargen render` end to end through the real CLI, with the output checked by ffmpeg itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import imageio_ffmpeg
import numpy as np
import pytest
import yaml

from tests.conftest import FAST, REPO, kill_tree, run_cli, write_speechlike_wav
from avatargen.io.audio import load_audio
from tests.ffmpeg_probe import decode_frames, probe, stream_start_times


def test_a_sound_track_that_starts_after_its_file_keeps_its_place_against_the_frames(tmp_path, face_png, speech_wav):
    # A video's sound delayed 0.6 s against its picture: frames, sound and the model's hearing all run on the file's
    # own timeline (silence first), so the lips move with the voice where a player plays it.
    delayed = tmp_path / "delayed.mp4"
    subprocess.run([imageio_ffmpeg.get_ffmpeg_exe(), "-v", "error", "-f", "lavfi", "-i", "color=size=64x64:rate=25",
                    "-itsoffset", "0.6", "-i", str(speech_wav), "-map", "0:v", "-map", "1:a", "-t", "3.6",
                    "-c:v", "libx264", "-c:a", "aac", str(delayed)], check=True)  # fmt: skip
    heard = load_audio(delayed, 16000)
    assert np.abs(heard[: int(0.55 * 16000)]).max() < 1e-3 < np.abs(heard[int(0.6 * 16000) :]).max()
    out = tmp_path / "out.mp4"
    assert run_cli("render", "-i", str(face_png), "-a", str(delayed), "-o", str(out), "-q", *FAST).returncode == 0
    assert stream_start_times(out) == {"video": 0.0, "audio": 0.0}
    info = probe(out)
    assert info["frames"] == round(len(heard) / 16000 * 25) and abs(info["audio_duration_s"] - len(heard) / 16000) < 0.05
    played = load_audio(out, 16000)
    onset = lambda wave: int(np.argmax(np.abs(wave) > 0.05))  # noqa: E731  the first loud sample
    assert abs(onset(played) - onset(heard)) < 0.02 * 16000, (onset(played), onset(heard))


def test_render_writes_a_playable_mp4_with_exact_frames_and_aligned_audio(tmp_path, face_png, speech_wav):
    out = tmp_path / "nested" / "out.mp4"
    result = run_cli("render", "--image", str(face_png), "--audio", str(speech_wav), "--output", str(out), "--json",
                     "--quiet", "--eval", *FAST)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    for key in ("frames", "fps", "duration_s", "chunks", "ttff_s", "wall_s", "gen_fps", "rtf", "peak_rss_mb"):
        assert key in report, key
    # --eval measures the video it just made, with the seams it knows (where consecutive frames change chunk).
    for key in ("offset_frames", "sync_confidence", "identity_distance", "seam_ratio", "flicker", "face_found"):
        assert key in report, key
    assert report["seams"][:4] == [14, 18, 30, 34] and report["seam_ratio"] > 0  # each 4-frame seam's two edges
    assert report["frames"] == 75 and report["fps"] == 25
    assert report["weights"] == "random" and "weights=random" in result.stderr  # the output says so
    # one process: no rank to split the work with, whatever runtime.sequence_parallel / guidance_parallel=auto say
    assert report["parallel"] == {"world": 1, "guidance": 1, "sequence": 1, "replicas": 1, "weights": "whole on every rank"}

    info = probe(out)
    assert (info["video_streams"], info["audio_streams"]) == (1, 1)
    assert (info["video_codec"], info["audio_codec"]) == ("h264", "aac")
    assert (info["width"], info["height"]) == (300, 300)  # the picture's size: reference compositing (pipeline.composite)
    assert info["frames"] == 75
    assert abs(info["video_duration_s"] - info["audio_duration_s"]) <= 1 / 25 + 1e-3
    assert not list(out.parent.glob("*.partial.mp4"))
    saved = yaml.safe_load(out.with_suffix(".yaml").read_text())
    assert saved["model"]["weights"] == "random"


def test_frames_differ_over_time_and_chunks_follow_the_schedule(tmp_path, face_png):
    audio = write_speechlike_wav(tmp_path / "a.wav", 2.0, rate=48000, channels=2)
    out = tmp_path / "o.mp4"
    result = run_cli("render", "-i", str(face_png), "-a", str(audio), "-o", str(out), "--json", "-q", *FAST, "pipeline.n_chunk_frames=12")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["frames"], report["chunks"], report["i_chunks"]) == (50, 5, 4)
    frames = decode_frames(out).astype(np.int16)
    assert frames.shape == (50, 300, 300, 3)  # face_png's size
    change = np.abs(np.diff(frames, axis=0)).mean(axis=(1, 2, 3))  # (49,) mean change from each frame to the next
    assert (change > 0.05).sum() >= 40, change  # a moving picture, not a still repeated
    assert np.abs(frames[25] - frames[0]).max() > 20  # and it goes somewhere: not a flicker around one frame


def test_missing_inputs_exit_2_without_traceback_or_output(tmp_path, face_png):
    out = tmp_path / "o.mp4"
    result = run_cli("render", "-i", str(face_png), "-a", str(tmp_path / "nope.wav"), "-o", str(out), *FAST)
    assert result.returncode == 2
    assert "nope.wav" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not out.exists() and not list(tmp_path.glob("*.mp4"))


def test_a_bad_input_prints_its_error_alone_not_the_notes_said_while_the_inputs_opened(tmp_path):
    # A photograph with the bundled model earns a warning as the image opens; the missing audio file then fails the
    # request: the user sees the one line that names the problem, not a warning about a render that never runs.
    from tests.eval import clips

    photo = clips.write_png(tmp_path / "astronaut.png", clips.astronaut())
    out = tmp_path / "o.mp4"
    result = run_cli("render", "-i", str(photo), "-a", str(tmp_path / "nope.wav"), "-o", str(out), "runtime.threads=1")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [line for line in result.stderr.strip().splitlines() if "nope.wav" in line]
    assert len(result.stderr.strip().splitlines()) == 1 and "looks like a photograph" not in result.stderr
    assert not out.exists()


def test_missing_checkpoint_exits_2_naming_it(tmp_path, face_png, speech_wav):
    out = tmp_path / "o.mp4"
    result = run_cli("render", "-i", str(face_png), "-a", str(speech_wav), "-o", str(out), f"model.checkpoint={tmp_path}/none.safetensors")
    assert result.returncode == 2
    assert "none.safetensors" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow  # torchrun renders are held by tests/distributed/test_sharded_render.py
def test_render_runs_unchanged_under_torchrun(tmp_path, face_png, speech_wav):
    out = tmp_path / "t.mp4"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1", "-m", "avatargen", "render",
           "-i", str(face_png), "-a", str(speech_wav), "-o", str(out), "--json", "-q", *FAST]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr
    assert probe(out)["frames"] == 75
    plain = tmp_path / "plain.mp4"
    result = run_cli("render", "-i", str(face_png), "-a", str(speech_wav), "-o", str(plain), "-q", *FAST)
    assert result.returncode == 0, result.stderr
    assert np.array_equal(decode_frames(out), decode_frames(plain))  # unchanged: the same frames as a plain render


def test_sigkill_mid_render_leaves_a_playable_partial_file(tmp_path, face_png):
    audio = write_speechlike_wav(tmp_path / "long.wav", 60.0)
    out = tmp_path / "killed.mp4"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(
        [sys.executable, "-m", "avatargen", "render", "-i", str(face_png), "-a", str(audio), "-o", str(out), "-q", *FAST,
         "output.gop_seconds=0.5"],
        env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    partial = out.with_name("killed.partial.mp4")
    deadline = time.monotonic() + 120
    try:
        # Wait until at least a couple of fragments have reached the disk.
        while time.monotonic() < deadline and (not partial.exists() or partial.stat().st_size < 40_000):
            assert process.poll() is None, "the render ended before it could be killed"
            time.sleep(0.2)
    finally:
        kill_tree(process.pid)  # everything at once, the encoder included, as a power cut would
        process.wait()
    assert not out.exists(), "a killed render must not leave a file under the output name"
    info = probe(partial)
    assert info["frames"] > 0 and info["video_codec"] == "h264"
