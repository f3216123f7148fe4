"""Never lose work: paths are files, one writer per output, inputs are never overwritten, what was rendered is kept,
and the errors that used to be exit 1 or a traceback are one line with their documented code."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from avatargen.config.loader import load_config
from avatargen.errors import BadInputError
from avatargen.io.output_lock import OutputLock, OutputLockedError
from avatargen.render import RenderRequest, render
from tests.conftest import FAST, REPO, descendants, run_cli, write_face_png, write_speechlike_wav
from tests.ffmpeg_probe import png_frame_count, probe, stream_start_times


def _start(*args: str, cwd: Path | None = None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "avatargen", "render", *args, "-q", *FAST], env=env, cwd=cwd,
                            start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def _wait_for(condition, process: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + 120
    while not condition():
        assert process.poll() is None, f"the render ended before {what}: {process.communicate()[1]}"
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _checkpoints(out: Path) -> int:
    return len(list(out.with_name(f"{out.stem}.resume").glob("state-*.safetensors")))


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.strip().splitlines() if not line.startswith(("note:", "warning:"))]


def _ffmpeg_child(process: subprocess.Popen, marker: str) -> int:
    """The pid of the render's ffmpeg whose command line holds ``marker`` (f32le: the audio decoder; rawvideo: the
    encoder)."""
    for pid in descendants(process.pid):
        try:
            if marker in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                return pid
        except OSError:
            continue
    return 0


def _probe_copy(path: Path, tmp_path: Path) -> dict:
    """Probe a file whose name ffmpeg would read as a URL, through a plain-named link."""
    link = tmp_path / "probe-link.mp4"
    link.unlink(missing_ok=True)
    link.symlink_to(path.resolve())
    return probe(link)


# --- 1. paths are files ----------------------------------------------------------------------------------------


def test_names_that_look_like_ffmpeg_urls_are_plain_local_files(tmp_path):
    (tmp_path / "x").mkdir()  # where `tee:x/pwned.mp4|...` used to write
    audio = write_speechlike_wav(tmp_path / "take:1.wav", 0.4)
    face = write_face_png(tmp_path / "face.png")
    result = run_cli("render", "-i", str(face), "-a", "take:1.wav", "-o", "tee:x/pwned.mp4|y.mp4", "-q", *FAST, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    written = tmp_path / "tee:x" / "pwned.mp4|y.mp4"
    assert _probe_copy(written, tmp_path)["frames"] == 10 and audio.exists()
    assert not list((tmp_path / "x").iterdir()) and not (tmp_path / "y.partial.mp4").exists()


@pytest.mark.parametrize("flag", ["-i", "-a"])
def test_a_url_of_another_scheme_than_s3_is_one_line_naming_what_to_give(tmp_path, flag):
    face, audio = write_face_png(tmp_path / "face.png"), write_speechlike_wav(tmp_path / "a.wav", 0.4)
    given = {"-i": str(face), "-a": str(audio)}
    for url, says in [("http://127.0.0.1:9/x", "download it first"), (f"file://{given[flag]}", f"'{given[flag]}'")]:
        result = run_cli("render", *[a for k, v in {**given, flag: url}.items() for a in (k, v)], "-o", "o.mp4", "-q",
                         *FAST, cwd=tmp_path)  # fmt: skip
        assert result.returncode == 2, result.stderr
        (line,) = _error_lines(result.stderr)
        assert line.startswith(f"error: '{url}' is a") and says in line, line


# --- 2. one writer per output ----------------------------------------------------------------------------------


def test_a_second_render_of_an_output_being_written_exits_2_naming_the_first(tmp_path):
    face, audio = write_face_png(tmp_path / "face.png"), write_speechlike_wav(tmp_path / "a.wav", 2.0)
    out = tmp_path / "o.mp4"
    first = _start("-i", str(face), "-a", str(audio), "-o", str(out))
    _wait_for(lambda: _checkpoints(out) >= 1, first, "its first checkpoint")
    first.send_signal(signal.SIGSTOP)  # frozen mid-render, however slow the second one is to start
    try:
        second = run_cli("render", "-i", str(face), "-a", str(audio), "-o", str(out), "-q", *FAST)
    finally:
        first.send_signal(signal.SIGCONT)
    assert second.returncode == 2, second.stderr
    lines = _error_lines(second.stderr)
    assert len(lines) == 1 and f"is being written by avatargen pid {first.pid} on host" in lines[0], second.stderr
    _, stderr = first.communicate(timeout=120)
    assert first.returncode == 0, stderr  # the first render's state was left alone: it finishes its video
    assert probe(out)["frames"] == 50 and not out.with_name("o.lock").exists()


# --- 4. inputs are never overwritten ---------------------------------------------------------------------------


def _same_file_case(kind: str, folder: Path) -> tuple[Path, Path]:
    """(audio input, output) for each way an output can be an input."""
    audio = write_speechlike_wav(folder / "talk.wav", 0.4)
    if kind == "same name":
        return audio.rename(folder / "talk.mp4"), folder / "talk.mp4"
    if kind == "input is the partial":
        return audio.rename(folder / "o.partial.mp4"), folder / "o.mp4"
    if kind == "input is the saved config":
        return audio.rename(folder / "o.yaml"), folder / "o.mp4"
    if kind == "hard link":
        os.link(audio, folder / "o.mp4")
        return audio, folder / "o.mp4"
    if kind == "symbolic link":
        (folder / "o.mp4").symlink_to(audio)
        return audio, folder / "o.mp4"
    (folder / "o.resume").mkdir()  # input inside the resume folder, which a fresh render replaces
    return audio.rename(folder / "o.resume" / "talk.wav"), folder / "o.mp4"


@pytest.mark.parametrize("kind", ["same name", "input is the partial", "input is the saved config", "hard link",
                                  "symbolic link", "inside the resume folder"])  # fmt: skip
def test_an_output_that_is_an_input_is_refused_before_anything_is_written(tmp_path, kind):
    audio, out = _same_file_case(kind, tmp_path)
    before = audio.read_bytes()
    face = write_face_png(tmp_path / "face.png")
    with pytest.raises(BadInputError, match="choose another output name"):
        render(RenderRequest(face, audio, out), load_config(FAST), warn=lambda message: None)
    assert audio.read_bytes() == before
    assert not out.with_name("o.lock").exists() and not out.with_name("talk.lock").exists()


# --- 3. what was rendered is never deleted by an error after it ------------------------------------------------


def test_an_audio_file_with_a_damaged_tail_renders_what_decoded_and_warns(tmp_path):
    import imageio_ffmpeg

    face, wav = write_face_png(tmp_path / "face.png"), write_speechlike_wav(tmp_path / "a.wav", 1.5)
    flac = tmp_path / "cut.flac"
    subprocess.run([imageio_ffmpeg.get_ffmpeg_exe(), "-v", "error", "-i", str(wav), str(flac)], check=True)
    flac.write_bytes(flac.read_bytes()[: flac.stat().st_size * 2 // 3])  # an interrupted copy
    out = tmp_path / "o.mp4"
    result = run_cli("render", "-i", str(face), "-a", str(flac), "-o", str(out), "-q", *FAST)
    assert result.returncode == 0, result.stderr
    warning = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    info = probe(out)
    assert len(warning) == 1 and "cut.flac' is damaged" in warning[0]
    assert warning[0].endswith(f"the video covers what decoded ({info['frames']} frames, {info['frames'] / 25:.2f} s)")
    assert 0 < info["frames"] < 37 and abs(info["audio_duration_s"] - info["video_duration_s"]) <= 1 / 25 + 1e-3


@pytest.mark.parametrize("ffmpeg, says", [("rawvideo", "ffmpeg stopped"), ("f32le", "killed by SIGKILL")],
                         ids=["encoder", "audio decoder"])  # fmt: skip
def test_when_an_ffmpeg_dies_the_partial_and_state_are_kept_and_the_message_says_how_to_resume(tmp_path, ffmpeg, says):
    face, audio = write_face_png(tmp_path / "face.png"), write_speechlike_wav(tmp_path / "a.wav", 4.0)
    out = tmp_path / "o.mp4"
    process = _start("-i", str(face), "-a", str(audio), "-o", str(out))
    _wait_for(lambda: _checkpoints(out) >= 1 and _ffmpeg_child(process, ffmpeg), process, "its first checkpoint")
    os.kill(_ffmpeg_child(process, ffmpeg), signal.SIGKILL)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 1, stderr
    lines = _error_lines(stderr)
    assert len(lines) == 1 and "Traceback" not in stderr and says in lines[0], stderr
    assert f"the video so far is in '{out.with_name('o.partial.mp4')}'" in lines[0] and lines[0].endswith("--resume")
    assert out.with_name("o.partial.mp4").exists() and _checkpoints(out) >= 1


def _render_past_its_first_checkpoint(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    """A 2-s render started in the background, once it has written its first resume point; (process, output)."""
    face, audio = write_face_png(tmp_path / "face.png"), write_speechlike_wav(tmp_path / "a.wav", 2.0)
    out = tmp_path / "o.mp4"
    process = _start("-i", str(face), "-a", str(audio), "-o", str(out))
    _wait_for(lambda: _checkpoints(out) >= 1, process, "its first checkpoint")
    return process, out


def test_a_second_ctrl_c_leaves_a_partial_whose_audio_ends_with_its_video(tmp_path):
    process, out = _render_past_its_first_checkpoint(tmp_path)
    process.send_signal(signal.SIGINT)
    time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    partial = out.with_name("o.partial.mp4")
    info = probe(partial)
    assert info["frames"] > 0 and info["audio_duration_s"] <= info["video_duration_s"] + 1 / 25, info
    assert stream_start_times(partial) == {"video": 0.0, "audio": 0.0}  # a plain decode: exactly its frames
    assert png_frame_count(partial, tmp_path / "png") == info["frames"]


def test_ctrl_c_while_an_interrupted_render_exits_keeps_its_exit_code(tmp_path):
    process, _ = _render_past_its_first_checkpoint(tmp_path)
    process.send_signal(signal.SIGINT)
    for line in process.stderr:  # the render has stopped and says so: the process is on its way out
        if line.startswith("error: interrupted"):
            break
    while process.poll() is None:  # a user still pressing Ctrl-C
        process.send_signal(signal.SIGINT)
        time.sleep(0.002)
    assert process.returncode == 130


# --- 7. one line and the documented exit code ------------------------------------------------------------------


def test_a_prompt_that_is_not_utf8_is_bad_input(tmp_path):
    face, audio = write_face_png(tmp_path / "face.png"), write_speechlike_wav(tmp_path / "a.wav", 0.4)
    prompt = b"smile \xff".decode("utf-8", errors="surrogateescape")  # what argv holds for those bytes
    with pytest.raises(BadInputError, match="the prompt is not valid UTF-8"):
        render(RenderRequest(face, audio, tmp_path / "o.mp4", prompt=prompt), load_config(FAST), warn=lambda m: None)
    assert not list(tmp_path.glob("o.*"))


def test_a_disk_that_cannot_take_the_lock_is_one_line_exit_2_and_leaves_nothing(tmp_path):
    """The lock is the first file a render writes: a full disk there was 'unexpected OSError', exit 1, and a 0-byte
    lock left behind. A file-size limit of 0 bytes (RLIMIT_FSIZE) fails the same write as a full disk does."""
    import resource

    face, audio = write_face_png(tmp_path / "face.png"), write_speechlike_wav(tmp_path / "a.wav", 0.4)
    out = tmp_path / "out" / "o.mp4"
    result = run_cli("render", "-i", str(face), "-a", str(audio), "-o", str(out), "-q", *FAST,
                     preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0)))  # fmt: skip
    lines = _error_lines(result.stderr)
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith(f"error: cannot write the lock '{out.with_name('o.lock')}'") and "disk" in lines[0]
    assert not (tmp_path / "out").exists()  # no 0-byte lock, and the folder it made removed again


def test_output_to_a_closed_stdout_is_exit_3(tmp_path):
    face, audio = write_face_png(tmp_path / "face.png"), write_speechlike_wav(tmp_path / "a.wav", 0.4)
    result = run_cli("render", "-i", str(face), "-a", str(audio), "-o", "-", *FAST, preexec_fn=lambda: os.close(1))
    assert result.returncode == 3, result.stderr
    assert _error_lines(result.stderr) == ["error: --output - writes MPEG-TS to stdout, but stdout is closed; pipe it "
                                           "into a program (| ffplay -) or give --output OUT.mp4"]  # fmt: skip


def test_a_render_that_fails_after_its_audio_decoder_started_leaves_it_stopped(tmp_path):
    """The audio decoders start before the output is claimed (time to first frame; a photo's speech drive reads the
    file on a thread of its own): a render refused there stops them, so a batch of many jobs does not pile them up."""
    audio = write_speechlike_wav(tmp_path / "talk.wav", 30.0)
    out = tmp_path / "o.mp4"
    # only this render's decoders count: an earlier test's CLI child, killed on exit, may still be taking its down
    others = set(_running_audio_decoders())
    held = OutputLock(out)
    held.acquire()  # another render writes it
    try:
        with pytest.raises(OutputLockedError):
            render(RenderRequest(write_face_png(tmp_path / "face.png"), audio, out), load_config(FAST),
                   warn=lambda message: None)  # fmt: skip
    finally:
        held.release()
    assert set(_running_audio_decoders()) - others == set()
    assert "speech-drive" not in [thread.name for thread in threading.enumerate()]


def _running_audio_decoders() -> list[int]:
    """This process's ffmpeg children decoding audio (``-f f32le``), not yet exited."""
    running = []
    for pid in descendants(os.getpid()):
        try:
            command, state = Path(f"/proc/{pid}/cmdline").read_bytes(), Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if b"f32le" in command and state.rsplit(")", 1)[1].split()[0] != "Z":
            running.append(pid)
    return running
