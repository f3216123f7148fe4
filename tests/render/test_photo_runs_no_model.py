"""A photograph rendered with its audio file runs no model: its speech opens the mouth and the interior is drawn in
the photo's colours, so nothing reads the model's frames. None of the model stages is built, loaded or run (what
ran, not how long it took), and the video is the one the models' frames gave; a cartoon still runs them. Streamed on
stdin, the same speech makes the same video; killed, the render resumes to it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import cv2
import numpy as np
import pytest
import soundfile as sf
import torch
from PIL import Image

from avatargen.compose.composite import ReferenceCompositor
from avatargen.config.loader import load_config
from avatargen.pipeline import build
from avatargen.render import RenderRequest, render
from tests.conftest import FAST, REPO, kill_tree, run_cli, write_speechlike_wav
from tests.eval import clips
from tests.ffmpeg_probe import decode_frames

MODEL_STAGES = {"context", "a2v", "sr", "decode"}


@pytest.fixture(scope="module")
def speech(tmp_path_factory):
    wave, rate = sf.read(REPO / "examples" / "speech_1.flac", dtype="float32")
    path = tmp_path_factory.mktemp("speech") / "speech.wav"
    sf.write(path, wave[: int(1.5 * rate)], rate)
    return path


def _render(picture, audio, out) -> tuple[dict, np.ndarray]:
    report = render(RenderRequest(picture, audio, out), load_config(FAST), warn=lambda line: None)
    return report, decode_frames(out)


def test_a_photo_with_its_audio_file_builds_and_runs_no_model_and_shows_the_same_video(tmp_path, speech, monkeypatch):
    photo = clips.write_png(tmp_path / "astronaut.png", clips.astronaut())
    build._cache.clear()  # the process's model set: a render that loads the models leaves them here
    report, frames = _render(photo, speech, tmp_path / "photo.mp4")
    assert build._cache == {}, "the photo's render built and loaded the models"
    assert not MODEL_STAGES & set(report["stages_run"]), report["stages_run"]
    assert report["stages_run"]["publish"] > 0 and report["frames"] == len(frames) == 38
    assert report["motion_frames"] == 2 and report["i_chunks"] == 2  # the family's schedule: the same keyframes
    assert report["offload"]["loads"] == report["offload"]["switches"] == 0  # the models' report: nothing placed

    monkeypatch.setattr(ReferenceCompositor, "reads_model", lambda self: True)  # as before: the models run
    with_models, model_frames = _render(photo, speech, tmp_path / "models.mp4")
    assert MODEL_STAGES <= set(with_models["stages_run"])
    np.testing.assert_array_equal(frames, model_frames)  # bit for bit: nothing of the model's frames was shown


def test_a_photo_composites_on_one_thread_and_the_next_render_in_the_process_gets_them_all(tmp_path, speech):
    """With no model, the compositing (OpenCV) is all the work beside the encoder: on one thread, not overlapped; a
    second thread only took CPU from the encoder. torch's threads stay the process's: a batch worker's next render
    (a cartoon) runs on all of them, overlapped."""
    photo = clips.write_png(tmp_path / "astronaut.png", clips.astronaut())
    threads = ["model.weights=random"]  # runtime.threads left to the render
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        report = render(RenderRequest(photo, speech, tmp_path / "photo.mp4"), load_config(threads),
                        warn=lambda line: None)  # fmt: skip
        assert report["overlap"] is False and cv2.getNumThreads() == 1 and torch.get_num_threads() == 2
        cartoon = render(RenderRequest(REPO / "examples" / "avatar_1.png", speech, tmp_path / "cartoon.mp4"),
                         load_config(threads), warn=lambda line: None)  # fmt: skip
        assert cartoon["overlap"] is True  # two threads: the emission overlapped with the generation
    finally:
        torch.set_num_threads(previous)


def test_a_cartoon_still_runs_the_models(tmp_path, speech):
    report, _ = _render(REPO / "examples" / "avatar_1.png", speech, tmp_path / "cartoon.mp4")
    assert all(report["stages_run"].get(stage, 0) > 0 for stage in MODEL_STAGES), report["stages_run"]


def test_a_photo_makes_the_same_video_from_stdin_as_from_its_file(tmp_path, speech):
    """The speech drive's level is causal (what was heard so far), so a live stream drives a photo's mouth, with no
    model, exactly as its file does."""
    photo = clips.write_png(tmp_path / "astronaut.png", clips.astronaut())
    outs = {kind: tmp_path / f"{kind}.mp4" for kind in ("file", "stdin")}
    from_file = run_cli("render", "-i", str(photo), "-a", str(speech), "-o", str(outs["file"]), "-q", "--json", *FAST)
    from_stdin = run_cli("render", "-i", str(photo), "-a", "-", "-o", str(outs["stdin"]), "-q", "--json", *FAST,
                         input=speech.read_bytes(), text=False)  # fmt: skip
    assert from_file.returncode == 0 and from_stdin.returncode == 0, from_stdin.stderr
    assert not MODEL_STAGES & set(json.loads(from_stdin.stdout)["stages_run"])
    np.testing.assert_array_equal(decode_frames(outs["stdin"]), decode_frames(outs["file"]))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> tuple:
    """A small photo, 20 s of speech (~1 s of rendering: time to stop it midway) and the frames of their render."""
    folder = tmp_path_factory.mktemp("uninterrupted")
    small = Image.fromarray(clips.astronaut()).resize((256, 256), Image.Resampling.LANCZOS)  # quick to render
    photo = clips.write_png(folder / "astronaut.png", np.asarray(small))
    audio = write_speechlike_wav(folder / "a.wav", 20.0)
    reference = folder / "reference.mp4"
    assert run_cli("render", "-i", str(photo), "-a", str(audio), "-o", str(reference), "-q").returncode == 0
    return photo, audio, decode_frames(reference)


@pytest.mark.parametrize("paced, states", [([], 2), (["--realtime"], 4)])
def test_a_photo_render_killed_after_its_checkpoints_resumes_to_the_uninterrupted_video(tmp_path, uninterrupted,
                                                                                        paced, states):  # fmt: skip
    """A render with no model saves resume points with an empty state (written and read without torch): SIGKILLed
    after a few, ``--resume`` continues from the last its video covers, and the joined video is the uninterrupted one.
    Behind ``--realtime``'s pacer the generation runs checkpoints ahead of the video: those its video covers are kept
    too (the last two only were: nothing left to resume from)."""
    photo, audio, reference = uninterrupted
    out = tmp_path / "out.mp4"
    command = [sys.executable, "-m", "avatargen", "render", "-i", str(photo), "-a", str(audio), "-o", str(out), "-q"]
    process = subprocess.Popen([*command, *paced], env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    folder = out.with_name("out.resume")
    while len(list(folder.glob("state-*.safetensors"))) < states:
        assert process.poll() is None, "the render ended before it could be killed"
        time.sleep(0.01)
    kill_tree(process.pid)
    process.wait()
    resumed = run_cli("render", "-i", str(photo), "-a", str(audio), "-o", str(out), "-q", "--resume", "--json")
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads(resumed.stdout)
    assert report["resumed_from"] > 0 and not MODEL_STAGES & set(report["stages_run"])
    np.testing.assert_array_equal(decode_frames(out), reference)
