"""Paths avatargen writes: checked before any work against the file system (a name too long with its suffixes, a
symbolic link loop) and against every input by file identity; a command that fails before writing leaves no folder
behind; a report that stdout cannot take after the video was written is one line, and the video stays."""

from __future__ import annotations

import os

import pytest

from tests.cli.test_never_lose_work import _error_lines
from tests.conftest import FAST, run_cli, write_face_png, write_speechlike_wav
from tests.ffmpeg_probe import probe


@pytest.fixture
def inputs(tmp_path):
    return write_face_png(tmp_path / "face.png"), write_speechlike_wav(tmp_path / "a.wav", 0.4)


def test_a_name_too_long_with_its_partial_suffix_is_refused_before_any_folder_is_made(tmp_path, inputs):
    face, audio = inputs
    name = "x" * 246 + ".mp4"  # 250 bytes: the file system takes it, not '<name>.partial.mp4'
    result = run_cli("render", "-i", str(face), "-a", str(audio), "-o", str(tmp_path / "new" / name), *FAST)
    assert result.returncode == 2, result.stderr
    (line,) = _error_lines(result.stderr)
    assert "(250 bytes) is too long: a render writes '<name>.partial.mp4'" in line and "at most 237 bytes" in line
    assert "choose a writable folder" not in line and not (tmp_path / "new").exists()


def test_an_output_folder_that_is_a_symlink_loop_is_one_line_exit_2(tmp_path, inputs):
    face, audio = inputs
    (tmp_path / "loop").symlink_to("loop")
    result = run_cli("render", "-i", str(face), "-a", str(audio), "-o", str(tmp_path / "loop" / "o.mp4"), *FAST)
    assert result.returncode == 2, result.stderr
    assert _error_lines(result.stderr) == [f"error: cannot write to output folder '{tmp_path / 'loop'}' "
                                           f"('{tmp_path / 'loop'}' is a symbolic link loop); choose a writable folder"]


def test_bad_input_found_after_the_folders_were_made_leaves_no_empty_folder(tmp_path, inputs):
    face, audio = inputs
    out = tmp_path / "new" / "deeper" / "o.mp4"
    result = run_cli("render", "-i", str(face), "-a", str(audio), "-o", str(out), "-q",
                     f"model.checkpoint={tmp_path / 'missing.safetensors'}")  # fmt: skip
    assert result.returncode == 2 and "does not exist" in result.stderr, result.stderr
    assert not (tmp_path / "new").exists()


def test_a_report_stdout_cannot_take_is_exit_2_and_the_video_stays(tmp_path, inputs):
    face, audio = inputs
    out = tmp_path / "o.mp4"
    to_full = lambda: os.dup2(os.open("/dev/full", os.O_WRONLY), 1)  # noqa: E731  `> /dev/full`
    result = run_cli("render", "-i", str(face), "-a", str(audio), "-o", str(out), "-q", "--json", *FAST, preexec_fn=to_full)
    assert result.returncode == 2, result.stderr
    assert _error_lines(result.stderr) == [f"error: the video is written to '{out}', but its report could not be "
                                           "written to stdout (No space left on device); give stdout room, keep its "
                                           "reader open, or redirect it elsewhere"]  # fmt: skip
    assert probe(out)["frames"] == 10


# --- avatargen eval: a sheet never overwrites an input, and a place it cannot go is refused before measuring ------


def _eval(tmp_path, *args: str):
    # The video does not exist: any refusal below comes before the measurement would have failed on it.
    face, audio = write_face_png(tmp_path / "face.png"), write_speechlike_wav(tmp_path / "a.wav", 0.4)
    return run_cli("eval", str(tmp_path / "nothing.mp4"), "-a", str(audio), "-r", str(face), *args, cwd=tmp_path)


@pytest.mark.parametrize("flag", ["--sheet", "--mouth-sheet"])
@pytest.mark.parametrize("how", ["same name", "hard link", "symbolic link", "through .."])
def test_a_sheet_that_is_an_input_is_refused_and_the_input_kept(tmp_path, flag, how):
    pytest.importorskip("dlib", reason="avatargen eval needs avatargen[eval]")
    face = write_face_png(tmp_path / "face.png")
    before = face.read_bytes()
    sheet = {"same name": "face.png", "hard link": "linked.png", "symbolic link": "sym.png", "through ..": "d/../face.png"}[how]
    if how == "hard link":
        os.link(face, tmp_path / sheet)
    elif how == "symbolic link":
        (tmp_path / sheet).symlink_to(face)
    elif how == "through ..":
        (tmp_path / "d").mkdir()
    result = _eval(tmp_path, flag, sheet)
    assert result.returncode == 2, result.stderr
    (line,) = _error_lines(result.stderr)
    assert f"output '{sheet}' is the input '{face}'; writing it would destroy the input: give the sheet another name" in line
    assert face.read_bytes() == before


@pytest.mark.parametrize("where, says", [("a_file/s.png", "'a_file' is a file"), ("/proc/s.png", "")],
                         ids=["under a file", "read-only folder"])  # fmt: skip
def test_a_sheet_that_cannot_be_written_is_refused_before_the_measurement(tmp_path, where, says):
    pytest.importorskip("dlib", reason="avatargen eval needs avatargen[eval]")
    (tmp_path / "a_file").write_text("a file, not a folder")
    result = _eval(tmp_path, "--sheet", where)
    assert result.returncode == 2, result.stderr
    (line,) = _error_lines(result.stderr)
    assert line.startswith(f"error: cannot write --sheet '{where}' (") and says in line and "nothing.mp4" not in line


def test_the_two_sheets_cannot_be_one_file(tmp_path):
    pytest.importorskip("dlib", reason="avatargen eval needs avatargen[eval]")
    result = _eval(tmp_path, "--sheet", "s.png", "--mouth-sheet", "./s.png")
    assert result.returncode == 2 and "--sheet and --mouth-sheet name the same file" in result.stderr, result.stderr


@pytest.mark.parametrize("flag", ["--sheet", "--mouth-sheet"])
@pytest.mark.parametrize("what", ["a user's file", "a link to a user's file"])
def test_a_sheet_name_holding_what_avatargen_did_not_write_is_refused_and_kept(tmp_path, flag, what):
    pytest.importorskip("dlib", reason="avatargen eval needs avatargen[eval]")
    mine = tmp_path / "mine.png"
    mine.write_bytes(b"the user's picture")
    sheet = "mine.png" if what == "a user's file" else "link.png"
    if sheet == "link.png":
        (tmp_path / sheet).symlink_to(mine)
    result = _eval(tmp_path, flag, sheet)
    assert result.returncode == 2, result.stderr
    (line,) = _error_lines(result.stderr)
    reason = "is a file avatargen did not write" if sheet == "mine.png" else "is a symbolic link"
    assert line == f"error: '{sheet}' {reason}; eval would replace it: move it away, choose another output name, or pass --overwrite to replace it"
    assert mine.read_bytes() == b"the user's picture"
