"""`avatargen render --video SOURCE -a SPEECH` (dubbing) and `-a LEFT -a RIGHT` (two speakers) with `model=wan_tiny`
through the real CLI: frame counts, the audio muxed, the frame size of the reference's buckets; and every bad input
of either refused in one line before a model is built."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from avatargen.config.loader import load_config
from avatargen.errors import BadInputError
from avatargen.io.ffmpeg import ffmpeg_exe
from avatargen.render import RenderRequest, render
from avatargen.render.inputs import open_audio
from avatargen.render.request import parse_box
from tests.conftest import FAST, run_cli, write_speechlike_wav
from tests.ffmpeg_probe import probe


def source_video(path, seconds: float, size: str = "160x96"):
    subprocess.run([ffmpeg_exe(), "-v", "error", "-y", "-f", "lavfi", "-i", f"testsrc=size={size}:rate=25:duration={seconds}",
                    "-c:v", "libx264", "-pix_fmt", "yuv420p", str(path)], check=True)  # fmt: skip
    return path


def test_a_dub_longer_than_its_source_follows_the_speech_in_the_file_and_live(tmp_path):
    video = source_video(tmp_path / "source.mp4", 0.6)  # 15 frames of 160x96
    speech = write_speechlike_wav(tmp_path / "speech.wav", 1.2)  # 30 frames: past the source's end its last frame
    out = tmp_path / "dub.mp4"
    live = tmp_path / "live" / "live.m3u8"
    result = run_cli("render", "--video", str(video), "-a", str(speech), "-o", str(out), "--json", "-q",
                     "--publish", str(live), "model=wan_tiny", *FAST)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["frames"] == 30
    assert probe(live)["frames"] == 30  # the live output got the same video
    info = probe(out)
    assert info["frames"] == 30 and info["audio_codec"] == "aac" and abs(info["audio_duration_s"] - 1.2) < 0.05
    assert (info["width"], info["height"]) == (80, 48)  # the 0.67 bucket (512 x 768 at 480p) at wan_tiny's scale


def test_two_speakers_one_after_the_other(tmp_path, face_png):
    left = write_speechlike_wav(tmp_path / "left.wav", 0.5)
    right = write_speechlike_wav(tmp_path / "right.wav", 0.3)
    out = tmp_path / "two.mp4"
    result = run_cli("render", "-i", str(face_png), "-a", str(left), "-a", str(right), "--audio-type", "add",
                     "--person-box", "0,0,150,300", "--person-box", "150,0,300,300", "-o", str(out), "--json", "-q",
                     "model=wan_tiny", *FAST)  # fmt: skip
    assert result.returncode == 0, result.stderr
    info = probe(out)
    assert info["frames"] == 20 and abs(info["audio_duration_s"] - 0.8) < 0.05  # 0.5 s, then 0.3 s


def _refusal(tmp_path, face_png, overrides=("model=wan_tiny",), **request) -> str:
    speech = write_speechlike_wav(tmp_path / "speech.wav", 0.3)
    fields = {"image": face_png, "audio": speech, "output": tmp_path / "out.mp4", **request}
    with pytest.raises(BadInputError) as error:
        render(RenderRequest(**fields), load_config([*overrides, *FAST]), warn=lambda _: None)
    assert not (tmp_path / "out.mp4").exists()
    message = str(error.value)
    assert "\n" not in message
    return message


def test_bad_inputs_are_refused_in_one_line(tmp_path, face_png):
    speech = write_speechlike_wav(tmp_path / "other.wav", 0.3)
    silent = tmp_path / "audio_only.mp4"
    subprocess.run([ffmpeg_exe(), "-v", "error", "-y", "-f", "lavfi", "-i", "sine=duration=0.5", str(silent)], check=True)
    assert "has no video stream" in _refusal(tmp_path, face_png, image=None, video=silent)
    assert "reaches outside the picture (300x300)" in _refusal(
        tmp_path, face_png, extra_audio=(speech,), person_boxes=((0, 0, 150, 300), (150, 0, 310, 300)))
    assert "2 --person-box for 1 audio file" in _refusal(tmp_path, face_png, person_boxes=((0, 0, 32, 64), (32, 0, 64, 64)))
    assert "not both" in _refusal(tmp_path, face_png, video=silent)
    assert "renders one speaker" in _refusal(tmp_path, face_png, ("model=tiny",), extra_audio=(speech,))
    assert "--video (dubbing) needs" in _refusal(tmp_path, face_png, ("model=tiny",), image=None, video=silent)
    assert "at most 2 speakers" in _refusal(tmp_path, face_png, extra_audio=(speech, speech))
    with pytest.raises(BadInputError, match="X0,Y0,X1,Y1"):
        parse_box("10,20,30")


def test_two_files_of_different_lengths_are_said_and_the_shorter_padded(tmp_path):
    notes = []
    long, short = write_speechlike_wav(tmp_path / "a.wav", 0.6), write_speechlike_wav(tmp_path / "b.wav", 0.3)
    source = open_audio([long, short], "para", load_config(["model=wan_tiny"]), 4000, notes.append)
    tracks = np.concatenate(list(source))
    assert tracks.shape == (9600, 2) and not tracks[4800:, 1].any()
    assert len(notes) == 1 and "0.60 s and 0.30 s" in notes[0]
