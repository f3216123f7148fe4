"""Stops keep the work: a signal never waits for the encoder to encode the rest of a long audio file, a stalled stdin
stream still stops (with the video of every sample that came), a killed render leaves no ffmpeg writing behind it, and
a stopped batch job stays resumable by the command the message prints."""

from __future__ import annotations

import io
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from avatargen.io.mp4_join import complete_prefix
from tests.cli.test_never_lose_work import _checkpoints, _error_lines, _ffmpeg_child, _start, _wait_for
from tests.conftest import FAST, REPO, run_cli, write_face_png, write_speechlike_wav
from tests.ffmpeg_probe import png_frame_count, probe, stream_start_times
from tests.io.test_encoder_stop import write_hours_long_wav

ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def _wav_bytes(seconds: float) -> bytes:
    t = np.arange(int(seconds * 16000)) / 16000
    buffer = io.BytesIO()
    sf.write(buffer, (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 16000, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def _catches(process: subprocess.Popen, signum: int) -> bool:
    """Whether ``process`` has a handler for ``signum`` installed (the SigCgt mask of /proc/PID/status)."""
    for line in Path(f"/proc/{process.pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def test_a_stop_on_hours_of_audio_closes_the_partial_at_once_with_the_resume_line(tmp_path):
    face, audio = write_face_png(tmp_path / "face.png"), write_hours_long_wav(tmp_path / "long.wav")
    out = tmp_path / "o.mp4"
    process = _start("-i", str(face), "-a", str(audio), "-o", str(out))
    _wait_for(lambda: _checkpoints(out) >= 1, process, "its first checkpoint")
    process.send_signal(signal.SIGINT)
    stopped = time.monotonic()
    _, stderr = process.communicate(timeout=50)  # was: 60 s for the encoder, then killed, exit 1
    # At once: 0.3 s on a quiet 2-core machine (docs/reliability.md); 5 s leaves room for a loaded one, and is still
    # far from waiting on an encoder that has hours of audio to read.
    assert time.monotonic() - stopped <= 5.0, time.monotonic() - stopped
    assert process.returncode == 130, stderr
    lines = _error_lines(stderr)
    assert len(lines) == 1 and lines[0].startswith("error: interrupted by SIGINT after") and lines[0].endswith("--resume")
    info = probe(out.with_name("o.partial.mp4"))
    assert info["frames"] > 0 and abs(info["audio_duration_s"] - info["video_duration_s"]) <= 1 / 25 + 1e-3, info


# One signal (SIGTERM), and SIGINT then a second SIGINT: a lone SIGINT takes SIGTERM's path (~8 s a case, 5 s of it the
# bound itself).
@pytest.mark.parametrize("signals, code", [(["SIGTERM"], 143), (["SIGINT", "SIGINT"], 130)],
                         ids=["SIGTERM", "SIGINT twice"])  # fmt: skip
def test_a_stop_ends_a_render_whose_encoder_stopped_reading_within_its_bound(tmp_path, signals, code):
    """The encoder stopped (SIGSTOP: as a stalled libx264 or a hung disk would): the render used to block in a write
    to ffmpeg's stdin, and every signal, a second SIGINT and SIGTERM included, was ignored for minutes."""
    face, audio = write_face_png(tmp_path / "face.png"), write_speechlike_wav(tmp_path / "a.wav", 8.0)
    out = tmp_path / "o.mp4"
    process = _start("-i", str(face), "-a", str(audio), "-o", str(out))
    partial = out.with_name("o.partial.mp4")  # stopped once it has muxed a fragment: the frames the stop must keep
    _wait_for(lambda: _checkpoints(out) >= 1 and partial.is_file() and complete_prefix(partial) > 0
              and _ffmpeg_child(process, "rawvideo"), process, "its first checkpoint and fragment")  # fmt: skip
    os.kill(_ffmpeg_child(process, "rawvideo"), signal.SIGSTOP)
    time.sleep(1.0)  # the render fills the pipe and waits on it
    stopped = time.monotonic()
    for name in signals:
        process.send_signal(getattr(signal, name))
        time.sleep(0.2)
    try:
        _, stderr = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise AssertionError("the render did not end within 60 s of the signal") from None
    took = time.monotonic() - stopped
    # STALL_AFTER_STOP_S (5 s) after the encoder's last byte, then SIGKILL and the trim: 3.3-3.7 s on a quiet 2-core
    # machine; 15 s leaves room for a loaded one.
    assert took <= 15.0, took
    assert process.returncode == code, stderr
    lines = _error_lines(stderr)
    assert len(lines) == 1 and lines[0].startswith(f"error: interrupted by {signals[0]}") and lines[0].endswith("--resume")
    info = probe(partial)  # what the encoder had finished, its audio cut at its video
    assert info["frames"] > 0 and abs(info["audio_duration_s"] - info["video_duration_s"]) <= 1 / 25 + 1e-3, info


def test_no_ffmpeg_holds_the_write_end_of_a_pipe_it_reads(tmp_path):
    """An ffmpeg holding the write end of its own input pipe never sees that input end (the audio of `-a - -o -` once
    deadlocked so). Each ffmpeg of a live render, from /proc: no pipe it reads from is also open for writing in it."""
    face = write_face_png(tmp_path / "face.png")
    process = subprocess.Popen([sys.executable, "-m", "avatargen", "render", "-i", str(face), "-a", "-", "--realtime",
                                "-o", "-", "-q", *FAST], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, env=ENV, start_new_session=True)  # fmt: skip
    process.stdin.write(_wav_bytes(2.0))
    process.stdin.flush()
    try:
        _wait_for(lambda: _ffmpeg_child(process, "rawvideo") and _ffmpeg_child(process, "f32le"), process,
                  "the encoder and the stream's decoder")  # fmt: skip
        for marker in ("rawvideo", "f32le"):
            ends: dict[str, set[str]] = {}
            pid = _ffmpeg_child(process, marker)
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("pipe:"):
                    flags = int(Path(f"/proc/{pid}/fdinfo/{fd.name}").read_text().split("flags:")[1].split()[0], 8)
                    ends.setdefault(target, set()).add("w" if flags & os.O_ACCMODE else "r")
            assert not [pipe for pipe, modes in ends.items() if modes == {"r", "w"}], (marker, ends)
    finally:
        process.stdin.close()  # the session ends: the render finishes its video
        stderr = process.stderr.read().decode()
        process.wait(timeout=120)
    assert process.returncode == 0, stderr


def test_sigterm_while_stdin_stalls_renders_the_audio_that_came_and_exits_143(tmp_path):
    face, out = write_face_png(tmp_path / "face.png"), tmp_path / "o.mp4"
    process = subprocess.Popen([sys.executable, "-m", "avatargen", "render", "-i", str(face), "-a", "-", "-o", str(out),
                                "-q", *FAST], stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)  # fmt: skip
    process.stdin.write(_wav_bytes(1.0))
    process.stdin.flush()  # and then nothing more, the pipe left open: a producer that stalls
    partial = out.with_name("o.partial.mp4")
    _wait_for(lambda: _ffmpeg_child(process, "rawvideo"), process, "the encoder")
    time.sleep(2)  # stalled: the render has made what it could and waits for more audio
    process.send_signal(signal.SIGTERM)
    stderr = process.communicate(timeout=60)[1].decode()
    assert process.returncode == 143, stderr
    assert _error_lines(stderr) == [f"error: interrupted by SIGTERM after 25 frames (1.00 s); the video is in '{partial}'"]
    info = probe(partial)
    assert info["frames"] == 25 and abs(info["audio_duration_s"] - 1.0) <= 1 / 25 + 1e-3, info
    # A stream's partial is its only video: a plain `ffmpeg -i o.partial.mp4 d/%04d.png` gives exactly its frames
    # (no stream starts before 0: the AAC priming is cut by an edit list, also in a fragmented file).
    assert stream_start_times(partial) == {"video": 0.0, "audio": 0.0}
    assert png_frame_count(partial, tmp_path / "png") == 25


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_the_render_starts_is_one_line_and_leaves_nothing(tmp_path, sig, code):
    """Before torch is even imported: a SIGINT there used to end with no line, a bare 'error: interrupted' or a
    traceback; a SIGTERM with no line, killed by the signal."""
    face, audio = write_face_png(tmp_path / "face.png"), write_speechlike_wav(tmp_path / "a.wav", 1.0)
    out = tmp_path / "new" / "o.mp4"
    process = _start("-i", str(face), "-a", str(audio), "-o", str(out))
    _wait_for(lambda: _catches(process, signal.SIGTERM), process, "a handler for SIGTERM")
    assert b"libtorch" not in Path(f"/proc/{process.pid}/maps").read_bytes(), "past the start-up already"
    process.send_signal(sig)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == code, stderr
    name = signal.Signals(sig).name
    assert stderr.strip().splitlines() == [f"error: interrupted by {name} while starting; nothing was written"], stderr
    assert not (tmp_path / "new").exists()


def test_sigterm_before_stdin_gives_any_audio_leaves_nothing(tmp_path):
    face, out = write_face_png(tmp_path / "face.png"), tmp_path / "new" / "o.mp4"
    process = subprocess.Popen([sys.executable, "-m", "avatargen", "render", "-i", str(face), "-a", "-", "-o", str(out),
                                "-q", *FAST], stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)  # fmt: skip
    _wait_for(lambda: _ffmpeg_child(process, "rawvideo"), process, "the encoder")  # started: the header is read next
    time.sleep(2)  # it waits for the WAV header
    process.send_signal(signal.SIGTERM)
    stderr = process.communicate(timeout=60)[1].decode()
    assert process.returncode == 143, stderr
    assert _error_lines(stderr) == ["error: interrupted by SIGTERM before any audio came on stdin; nothing was written"]
    assert not (tmp_path / "new").exists()


def test_audio_from_a_closed_stdin_is_exit_2_in_one_line(tmp_path):
    face = write_face_png(tmp_path / "face.png")
    result = run_cli("render", "-i", str(face), "-a", "-", "-o", str(tmp_path / "o.mp4"), *FAST, preexec_fn=lambda: os.close(0))
    assert result.returncode == 2, result.stderr
    assert _error_lines(result.stderr) == ["error: --audio - reads audio from stdin, but stdin is closed; pipe WAV into "
                                           "--audio -, or raw s16le PCM with --audio-rate and --audio-channels"]  # fmt: skip


def test_the_encoder_dies_with_a_render_killed_by_sigkill_and_writes_nothing_more(tmp_path):
    face, audio = write_face_png(tmp_path / "face.png"), write_hours_long_wav(tmp_path / "long.wav")
    out = tmp_path / "o.mp4"
    process = _start("-i", str(face), "-a", str(audio), "-o", str(out))
    _wait_for(lambda: _checkpoints(out) >= 1 and _ffmpeg_child(process, "rawvideo"), process, "its first checkpoint")
    encoder = _ffmpeg_child(process, "rawvideo")
    process.kill()  # the render alone, as the OOM killer or a pre-empting scheduler does
    process.communicate(timeout=30)
    deadline = time.monotonic() + 5
    while Path(f"/proc/{encoder}").exists() and b"ffmpeg" in Path(f"/proc/{encoder}/cmdline").read_bytes():
        assert time.monotonic() < deadline, "the encoder outlived its render (it went on encoding the audio)"
        time.sleep(0.05)
    partial = out.with_name("o.partial.mp4")
    size = partial.stat().st_size
    time.sleep(1.0)
    assert partial.stat().st_size == size


@pytest.mark.slow  # two torchrun launches: ~35 s on the shared 2-core machine
def test_the_resume_command_a_stopped_torchrun_render_prints_runs_as_printed(tmp_path):
    """Under torchrun the printed command was `avatargen render ... --resume`: not the launch that was stopped."""
    import shutil

    face, audio = write_face_png(tmp_path / "face.png"), write_speechlike_wav(tmp_path / "a.wav", 2.0)
    out = tmp_path / "o.mp4"
    launcher = ["torchrun"] if shutil.which("torchrun") else [sys.executable, "-m", "torch.distributed.run"]
    process = subprocess.Popen([*launcher, "--standalone", "--nproc-per-node", "1", "-m", "avatargen", "render", "-i",
                                str(face), "-a", str(audio), "-o", str(out), "-q", *FAST], env=ENV, cwd=tmp_path,
                               start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    _wait_for(lambda: _checkpoints(out) >= 1, process, "its first checkpoint")
    process.send_signal(signal.SIGINT)  # to torchrun, which passes it on
    _, stderr = process.communicate(timeout=120)
    line = next(line for line in stderr.splitlines() if line.startswith("error: interrupted by SIGINT"))
    command = shlex.split(line.split("resume with: ", 1)[1])
    assert command[: len(launcher) + 5] == [*launcher, "--standalone", "--nproc-per-node", "1", "-m", "avatargen"]
    assert command[-1] == "--resume", command
    resumed = subprocess.run(command, env=ENV, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "rendering from the start" not in resumed.stderr and probe(out)["frames"] == 50


def _batch(jobs: Path, out_dir: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "avatargen", "batch", str(jobs), "--out-dir", str(out_dir), *FAST],
                            env=ENV, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def _stop_a_batch_job(tmp_path: Path) -> tuple[list[str], Path]:
    """A batch of one 2-s job, SIGINT once the job has a checkpoint; (the command its message says resumes, out-dir)."""
    write_face_png(tmp_path / "face.png"), write_speechlike_wav(tmp_path / "a.wav", 2.0)
    jobs, out_dir = tmp_path / "jobs.jsonl", tmp_path / "out"
    jobs.write_text(json.dumps({"image": "face.png", "audio": "a.wav", "output": "x.mp4"}) + "\n")
    process = _batch(jobs, out_dir)
    _wait_for(lambda: _checkpoints(out_dir / "x.mp4") >= 1, process, "the job's first checkpoint")
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert not (out_dir / "x.failed.json").exists()  # not failed for good: the next worker to claim it resumes it
    return shlex.split(_error_lines(stderr)[-1].split("resume with: ", 1)[1]), out_dir


def test_a_stopped_batch_job_stays_resumable_and_its_message_names_the_batch_command(tmp_path):
    command, out_dir = _stop_a_batch_job(tmp_path)
    assert command == ["avatargen", "batch", str(tmp_path / "jobs.jsonl"), "--out-dir", str(out_dir), *FAST]
    status = json.loads(run_cli("batch", "status", str(out_dir), "--json").stdout)
    assert status["pending"] == 1 and status["jobs"][0]["resumable"], status


@pytest.mark.slow  # a second batch run (~10 s); the fast test above checks the command it runs
def test_the_command_a_stopped_batch_prints_resumes_the_job(tmp_path):
    command, out_dir = _stop_a_batch_job(tmp_path)
    out = out_dir / "x.mp4"
    resumed = subprocess.run([sys.executable, "-m", *command], env=ENV, capture_output=True, text=True, timeout=300,
                             cwd=Path.cwd())  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads((out_dir / "batch_report.json").read_text())
    assert report["jobs"][0]["status"] == "ok" and report["jobs"][0]["resumed_from"] > 0
    assert probe(out)["frames"] == 50


@pytest.mark.slow  # the render's stop on hours of audio is the test above; this one adds the batch around it (~10 s)
def test_sigterm_on_a_batch_job_with_hours_of_audio_exits_143_and_the_job_is_not_failed(tmp_path):
    write_face_png(tmp_path / "face.png"), write_hours_long_wav(tmp_path / "long.wav")
    jobs, out_dir = tmp_path / "jobs.jsonl", tmp_path / "out"
    jobs.write_text(json.dumps({"image": "face.png", "audio": "long.wav", "output": "x.mp4"}) + "\n")
    process = _batch(jobs, out_dir)
    _wait_for(lambda: _checkpoints(out_dir / "x.mp4") >= 1, process, "the job's first checkpoint")
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=50)
    assert process.returncode == 143, stderr
    assert not (out_dir / "x.failed.json").exists()
    status = json.loads(run_cli("batch", "status", str(out_dir), "--json").stdout)
    assert status["pending"] == 1 and status["jobs"][0]["resumable"], status


def test_a_render_stopped_before_its_first_checkpoint_does_not_offer_a_resume_that_would_start_over(tmp_path):
    """With no checkpoint saved yet, ``--resume`` renders from the start: the stop says so instead of printing a
    resume command, and keeps the frames it made."""
    from contextlib import contextmanager
    from types import SimpleNamespace

    from avatargen.config.loader import load_config
    from avatargen.errors import RenderInterrupted
    from avatargen.render import RenderRequest, render
    from avatargen.resume import StopRequests

    face, audio = write_face_png(tmp_path / "face.png"), write_speechlike_wav(tmp_path / "a.wav", 4.0)
    out, stop = tmp_path / "o.mp4", StopRequests()

    @contextmanager
    def stop_after_the_first_segment(fps, estimate):
        yield SimpleNamespace(update=lambda progress: stop.request())

    cfg = load_config([*FAST, "output.gop_seconds=60"])  # the first checkpoint 60 s in: after this 4-s render's end
    with pytest.raises(RenderInterrupted) as stopped:
        render(RenderRequest(image=face, audio=audio, output=out), cfg, progress_factory=stop_after_the_first_segment,
               warn=lambda message: None, resume_command="avatargen render ... --resume", stop=stop)  # fmt: skip
    message = str(stopped.value)
    assert stopped.value.exit_code == 130 and "--resume" not in message, message
    assert "before its first checkpoint" in message and "run the command again" in message, message
    assert probe(out.with_name("o.partial.mp4"))["frames"] > 0  # the frames made are kept
    assert not (tmp_path / "o.resume").exists()  # nothing in it to resume from


def test_a_stopped_batch_worker_reports_what_it_did_and_says_how_to_continue(tmp_path):
    # it wrote no report and ended on the interrupted job's own line ("before the first frame; nothing was written")
    face = write_face_png(tmp_path / "face.png")
    audio = write_speechlike_wav(tmp_path / "a.wav", 6.0)
    rows = [json.dumps({"image": str(face), "audio": str(audio), "output": f"v{i}.mp4"}) for i in range(4)]
    (tmp_path / "jobs.jsonl").write_text("\n".join(rows) + "\n")
    log = tmp_path / "stderr.txt"
    with log.open("w") as err:
        process = subprocess.Popen([sys.executable, "-m", "avatargen", "batch", str(tmp_path / "jobs.jsonl"),
                                    "--out-dir", str(tmp_path / "out"), *FAST], stdout=subprocess.DEVNULL, stderr=err,
                                   env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
        deadline = time.monotonic() + 120
        while "job 0 ok" not in log.read_text() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=60)
    last = log.read_text().strip().splitlines()[-1]
    if code == 0:
        pytest.skip("the batch finished before the signal")
    assert code == 143 and last.startswith("error: batch worker stopped by SIGTERM after "), log.read_text()
    command = f"avatargen batch {tmp_path / 'jobs.jsonl'} --out-dir {tmp_path / 'out'} {' '.join(FAST)}"
    assert last.endswith((f"continue with: {command}", f"resume with: {command}")), last
    report = json.loads((tmp_path / "out" / "batch_report.json").read_text())
    assert report["exit_code"] == 143 and report["jobs"][0]["status"] == "ok"
