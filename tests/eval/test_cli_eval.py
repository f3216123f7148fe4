"""`avatargen eval` from the command line: the sheet, and one line on how to get the face networks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.conftest import REPO

pytest.importorskip("dlib", reason="the evaluator needs avatargen[eval]")

from tests.eval import clips  # noqa: E402
from avatargen.io.owned_names import foreign_reason  # noqa: E402


def test_without_the_eval_extra_one_line_says_how_to_install_it_and_exit_is_2(tmp_path: Path) -> None:
    hide_dlib = "import sys; sys.modules['dlib'] = None; from avatargen.cli import main; main()"
    for args in (["eval", "video.mp4", "--audio", "a.wav"],
                 ["render", "-i", "x.png", "-a", "a.wav", "-o", str(tmp_path / "o.mp4"), "--eval"]):  # fmt: skip
        result = subprocess.run([sys.executable, "-c", hide_dlib, *args], capture_output=True, text=True,
                                cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=120)  # fmt: skip
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "pip install 'avatargen[eval]'" in lines[0], result.stderr


def test_eval_json_and_sheet_on_a_talking_photo(tmp_path: Path) -> None:
    audio, openness = clips.speech(4.0)
    video = clips.write_mp4(tmp_path / "talk.mp4", clips.talking_frames(openness))
    wav = clips.write_wav(tmp_path / "talk.wav", audio)
    reference = clips.write_png(tmp_path / "ref.png", clips.astronaut())
    sheet, mouths = tmp_path / "sheet.png", tmp_path / "mouths.png"
    (tmp_path / "mine.png").write_bytes(b"the user's picture")
    mouths.symlink_to(tmp_path / "mine.png")  # --overwrite replaces the link as a link, its target untouched
    result = subprocess.run(
        [sys.executable, "-m", "avatargen", "eval", str(video), "-a", str(wav), "-r", str(reference),
         "--sheet", str(sheet), "--mouth-sheet", str(mouths), "--json", "--overwrite"],
        capture_output=True, text=True, cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["offset_frames"] == 0 and report["face_found"] == 1.0 and "curves" not in report
    assert report["mouth_spill_frames"] == 0.0  # the clip's cavity is drawn on her mouth, the crop drifting with it
    assert (tmp_path / "mine.png").read_bytes() == b"the user's picture" and not mouths.is_symlink()
    assert foreign_reason(sheet, "png") is None and foreign_reason(mouths, "png") is None  # a rerun replaces them
    image = np.asarray(Image.open(sheet))
    assert image.shape[0] > 600 and image.shape[1] > 1000 and image.std() > 20  # a drawn sheet, not a blank
    # The mouth sheet: ten crops of the loudest syllables, each showing the clip's dark mouth cavity wide open.
    crops = np.asarray(Image.open(mouths).convert("RGB")).astype(int)
    x0, y0, x1, y1 = report["mouth_box"]
    crop_w = 2 * int(1.6 * (x1 - x0))
    assert abs(crops.shape[1] - (10 * (crop_w + 4) + 4)) <= 10 * 4, (crops.shape, report["mouth_box"])
    cavity = (crops[..., 0] - crops[..., 1] > 30) & (crops[..., 1] < 45)  # the drawn mouth's (70, 20, 25)
    per_crop = [cavity[:, 4 + i * (crop_w + 4) : 4 + i * (crop_w + 4) + crop_w].sum() for i in range(10)]
    assert min(per_crop) > 0.3 * max(per_crop) > 0, per_crop  # every crop an open mouth, not a closed one


def test_eval_measures_a_video_whose_name_ffmpeg_would_read_as_a_protocol(tmp_path: Path) -> None:
    # A relative name starting with "concat:" is a legal file name; bare, ffmpeg opens the concat protocol on "a|b.mp4"
    # (two files, neither there) instead of the file itself. With --sheet the thumbnails are decoded too.
    audio, openness = clips.speech(2.0)
    clips.write_mp4(tmp_path / "concat:a|b.mp4", clips.talking_frames(openness))
    clips.write_wav(tmp_path / "talk.wav", audio)
    result = subprocess.run(
        [sys.executable, "-m", "avatargen", "eval", "concat:a|b.mp4", "-a", "talk.wav", "--sheet", "sheet.png", "--json"],
        capture_output=True, text=True, cwd=tmp_path, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["face_found"] == 1.0 and report["frames"] == 50, report
    assert np.asarray(Image.open(tmp_path / "sheet.png")).std() > 20  # thumbnails drawn from the same file
