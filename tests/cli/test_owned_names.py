"""What a render owns and what it refuses to touch (docs/owned-names.md): a user's file, folder or link at one of the
output's names is never deleted, truncated or written through; a rerun replaces avatargen's own files; --overwrite
replaces the rest (a link as a link, its target untouched). Real files, real links, the real CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from avatargen.io.resume_store import VERSION
from tests.conftest import FAST, REPO, run_cli, write_face_png, write_speechlike_wav
from tests.ffmpeg_probe import probe


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("owned")
    return write_face_png(folder / "face.png"), write_speechlike_wav(folder / "a.wav", 0.4)


def _render(inputs: tuple[Path, Path], out: Path, *extra: str):
    face, audio = inputs
    return run_cli("render", "-i", str(face), "-a", str(audio), "-o", str(out), "-q", *FAST, *extra)


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.strip().splitlines() if not line.startswith(("note:", "warning:"))]


def _snapshot(folder: Path) -> dict[str, object]:
    """Every name under ``folder``: a link's target text, a file's bytes, a folder's mark (links never followed)."""
    seen: dict[str, object] = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(root) / name
            rel = str(path.relative_to(folder))
            if path.is_symlink():
                seen[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                seen[rel] = "folder"
            else:
                seen[rel] = path.read_bytes()
    return seen


def _plant(folder: Path, what: str) -> None:
    """A user's object at one of ``folder/mine.mp4``'s names (and a file of theirs a link may point at)."""
    (folder / "target.txt").write_text("the user's own words\n")
    (folder / "theirs").mkdir()
    (folder / "theirs" / "ch1.txt").write_text("thesis\n")
    name, kind = what.split(":")
    path = folder / f"mine{name}"
    if kind == "file":
        path.write_text("a file of the user's\n")
    elif kind == "folder":
        path.mkdir()
        (path / "ch1.txt").write_text("thesis, chapter 1\n")
    elif kind == "link-file":
        path.symlink_to("target.txt")
    elif kind == "link-folder":
        path.symlink_to("theirs")
    elif kind == "dangling":
        path.symlink_to("nowhere.mp4")


# every output name, with each kind of object a user may have there
PLANTED = [".resume:folder", ".resume:file", ".resume:link-folder", ".mp4:file", ".mp4:link-file", ".mp4:dangling",
           ".yaml:file", ".yaml:folder", ".yaml:link-file", ".partial.mp4:file", ".partial.mp4:link-file",
           ".partial.mp4:dangling", ".lock:file", ".lock:folder", ".lock:link-file"]  # fmt: skip


@pytest.mark.parametrize("what", PLANTED)
def test_a_users_object_at_an_output_name_is_refused_before_the_first_frame_and_left_as_it_was(tmp_path, inputs, what):
    _plant(tmp_path, what)
    before = _snapshot(tmp_path)
    result = _render(inputs, tmp_path / "mine.mp4")
    assert result.returncode == 2, result.stderr
    lines = _error_lines(result.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.stderr, result.stderr
    assert "mine" in lines[0] and ("--overwrite" in lines[0] or "folder" in lines[0]), lines[0]
    assert _snapshot(tmp_path) == before  # nothing deleted, truncated, written through or added


# each kind of object once in the default suite, every name with every kind in the slow run (each is a render)
FAST_OVERWRITES = {".resume:folder", ".resume:link-folder", ".mp4:file", ".partial.mp4:link-file", ".lock:link-file",
                   ".yaml:file", ".partial.mp4:dangling"}  # fmt: skip


@pytest.mark.parametrize("what", [w if w in FAST_OVERWRITES else pytest.param(w, marks=pytest.mark.slow)
                                  for w in PLANTED if not w.endswith(":folder") or w.startswith(".resume")])  # fmt: skip
def test_overwrite_replaces_a_users_object_and_never_writes_through_a_link(tmp_path, inputs, what):
    _plant(tmp_path, what)
    result = _render(inputs, tmp_path / "mine.mp4", "--overwrite")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "target.txt").read_text() == "the user's own words\n"  # a link's target is never written
    assert (tmp_path / "theirs" / "ch1.txt").read_text() == "thesis\n"
    out = tmp_path / "mine.mp4"
    assert not out.is_symlink() and probe(out)["frames"] == 10
    assert not (tmp_path / "mine.lock").exists() and not (tmp_path / "mine.resume").exists()
    assert not (tmp_path / "mine.partial.mp4").exists() and not (tmp_path / "mine.yaml").is_symlink()


def test_a_rerun_replaces_its_own_files_and_the_marks_say_whose_they_are(tmp_path, inputs):
    out = tmp_path / "talk.mp4"
    assert _render(inputs, out).returncode == 0
    first = out.stat().st_ino
    assert out.with_suffix(".yaml").read_text().startswith("# avatargen")
    assert b"made with avatargen" in out.read_bytes()[:8192]  # the header (moov) comes first: +faststart
    result = _render(inputs, out, "pipeline.n_chunk_frames=8")
    assert result.returncode == 0, result.stderr
    assert out.stat().st_ino != first and "n_chunk_frames: 8" in out.with_suffix(".yaml").read_text()
    # empty files hold nothing to lose; a lock file a killed render left (its JSON) is avatargen's
    out.with_suffix(".yaml").write_text("")
    (tmp_path / "talk.partial.mp4").write_bytes(b"")
    (tmp_path / "talk.lock").write_text(json.dumps({"pid": 1, "host": "h", "started": 0.0}))
    assert _render(inputs, out).returncode == 0


def test_a_killed_renders_resume_folder_is_its_own_and_a_users_file_beside_it_is_not(tmp_path, inputs):
    out = tmp_path / "talk.mp4"
    folder = tmp_path / "talk.resume"
    folder.mkdir()
    (folder / ".avatargen-resume").write_text("made by avatargen\n")
    (folder / "resume.json").write_text("{}")
    (tmp_path / "talk.partial.mp4").write_bytes(b"\0" * 100)  # killed before its header: the folder vouches for it
    assert _render(inputs, out).returncode == 0
    assert not folder.exists() and not (tmp_path / "talk.partial.mp4").exists()


def test_a_hand_edited_resume_state_is_one_line_exit_2(tmp_path, inputs):
    face, audio = inputs
    out = tmp_path / "talk.mp4"
    folder = tmp_path / "talk.resume"
    folder.mkdir()
    (folder / ".avatargen-resume").write_text("made by avatargen\n")
    (folder / "resume.json").write_text(json.dumps({"version": VERSION, "fingerprint": {}, "parts": [], "partial": None,
                                                    "checkpoints": [{"frames": "ten", "file": "s", "meta": {}}]}))  # fmt: skip
    result = _render(inputs, out, "--resume")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    lines = _error_lines(result.stderr)
    assert len(lines) == 1 and "unreadable" in lines[0] and "without --resume" in lines[0], lines


def test_the_config_is_beside_the_video_before_the_video_takes_its_name(tmp_path, inputs):
    """OUT.yaml is renamed into place before OUT.mp4 (a kill between the two leaves no video without its config),
    seen by the interpreter's audit events of the real render."""
    face, audio = inputs
    out = tmp_path / "talk.mp4"
    code = f"""
import sys
from pathlib import Path
renames = []
sys.addaudithook(lambda event, args: renames.append(Path(str(args[1])).name) if event == "os.rename" else None)
from avatargen.config.loader import load_config
from avatargen.render import RenderRequest, render
render(RenderRequest(image=Path({str(face)!r}), audio=Path({str(audio)!r}), output=Path({str(out)!r})),
       load_config({FAST!r}), warn=lambda line: None)
names = [name for name in renames if name in ("talk.yaml", "talk.mp4")]
assert names == ["talk.yaml", "talk.mp4"], renames
print("ok")
"""
    import subprocess

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
    assert out.with_suffix(".yaml").read_text().startswith("# avatargen")


def _write_jobs(folder: Path, inputs: tuple[Path, Path], rows: list[dict]) -> Path:
    face, audio = inputs
    jobs = folder / "jobs.jsonl"
    jobs.write_text("".join(json.dumps({"image": str(face), "audio": str(audio), **row}) + "\n" for row in rows))
    return jobs


def test_a_batch_row_never_writes_into_another_rows_resume_folder(tmp_path, inputs):
    """A row inside ``a.resume/`` would be deleted with it when a render of ``a.mp4`` ends, or would delete that
    render's state: refused by name, whichever row runs first."""
    jobs = _write_jobs(tmp_path, inputs, [{"output": "a.mp4"}, {"output": "a.resume/x.mp4"}])
    out_dir = tmp_path / "out"
    result = run_cli("batch", str(jobs), "--out-dir", str(out_dir), *FAST)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "is inside" in result.stderr and "a.resume" in result.stderr, result.stderr
    assert probe(out_dir / "a.mp4")["frames"] == 10 and not (out_dir / "a.resume" / "x.mp4").exists()


def _start_render(inputs: tuple[Path, Path], out: Path, *extra: str) -> subprocess.Popen:
    face, audio = inputs
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "avatargen", "render", "-i", str(face), "-a", str(audio), "-o",
                             str(out), "-q", *FAST, *extra], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)  # fmt: skip


def _stopped_once(process: subprocess.Popen, ready, what: str) -> None:
    """Wait for ``ready()`` while ``process`` runs, then SIGSTOP it: frozen mid-render, however slow the next command."""
    deadline = time.monotonic() + 120
    while not ready():
        assert process.poll() is None, f"the render ended before {what}: {process.communicate()[1]}"
        assert time.monotonic() < deadline, what
        time.sleep(0.05)
    process.send_signal(signal.SIGSTOP)


@pytest.fixture(scope="module")
def long_inputs(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("owned-long")
    return write_face_png(folder / "face.png"), write_speechlike_wav(folder / "a.wav", 2.0)


@pytest.mark.parametrize("other", ["a.partial.mp4", "a.resume/x.mp4", ".a.joining.mp4"])
def test_an_output_at_a_running_renders_side_name_is_refused_and_the_running_render_finishes(tmp_path, inputs,
                                                                                               long_inputs, other):  # fmt: skip
    """``-o a.partial.mp4`` while ``-o a.mp4`` ran used to exit 0 and leave the second render's video as a.mp4."""
    out = tmp_path / "a.mp4"
    first = _start_render(long_inputs, out)
    _stopped_once(first, lambda: any((tmp_path / "a.resume").glob("state-*")), "its first checkpoint")
    try:
        second = _render(inputs, tmp_path / other)
    finally:
        first.send_signal(signal.SIGCONT)
    lines = _error_lines(second.stderr)
    assert second.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: output"), second.stderr
    _, stderr = first.communicate(timeout=120)
    assert first.returncode == 0, stderr
    assert probe(out)["frames"] == 50 and not (tmp_path / "a.partial.mp4").exists()


def test_two_rows_of_a_jobs_file_at_a_video_and_its_partial_name_never_share_it(tmp_path, inputs):
    jobs = _write_jobs(tmp_path, inputs, [{"output": "a.mp4"}, {"output": "a.partial.mp4"}])
    out_dir = tmp_path / "out"
    result = run_cli("batch", str(jobs), "--out-dir", str(out_dir), *FAST)
    assert result.returncode == 2, result.stdout + result.stderr
    assert probe(out_dir / "a.mp4")["frames"] == 10 and not (out_dir / "a.partial.mp4").exists()


# --- a publish target's names: the playlist, its segments, its lock -----------------------------------------------


def _publish(inputs: tuple[Path, Path], folder: Path, *extra: str):
    return _render(inputs, folder / "o.mp4", "--publish", str(folder / "live" / "x.m3u8"), *extra)


@pytest.mark.parametrize("what", ["playlist", "segment", "link"])
def test_a_users_playlist_or_segment_is_refused_and_overwrite_replaces_it(tmp_path, inputs, what):
    live = tmp_path / "live"
    live.mkdir()
    (tmp_path / "target.txt").write_text("the user's own words\n")
    if what == "playlist":  # a stream of the user's own, made by another program
        (live / "x.m3u8").write_text("#EXTM3U\n#EXTINF:1.0,\nx_00000.ts\n#EXT-X-ENDLIST\n")
    elif what == "segment":
        (live / "x_00000.ts").write_bytes(b"\x47" + bytes(187) * 4)
    else:
        (live / "x_00000.ts").symlink_to("../target.txt")
    before = _snapshot(tmp_path)
    result = _publish(inputs, tmp_path)
    lines = _error_lines(result.stderr)
    assert result.returncode == 2 and len(lines) == 1 and "--overwrite" in lines[0] and "live/x" in lines[0], result.stderr
    assert _snapshot(tmp_path) == before
    result = _publish(inputs, tmp_path, "--overwrite")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "target.txt").read_text() == "the user's own words\n"
    segments = [live / name for name in (live / "x.m3u8").read_text().splitlines() if name.endswith(".ts")]
    assert sum(probe(s)["frames"] for s in segments) == 10 and not any(s.is_symlink() for s in segments)
    assert not (live / "x.m3u8.lock").exists()


def test_a_link_at_a_segments_temporary_name_is_never_written_through_and_a_rerun_replaces_its_own_stream(tmp_path,
                                                                                                          inputs):  # fmt: skip
    live = tmp_path / "live"
    live.mkdir()
    (tmp_path / "target.txt").write_text("the user's own words\n")
    (live / "x_00000.ts.tmp").symlink_to("../target.txt")
    (live / "x.m3u8.tmp").symlink_to("../target.txt")
    for _ in range(2):  # the second run finds the first's stream, avatargen's: replaced
        result = _publish(inputs, tmp_path)
        assert result.returncode == 0, result.stderr
        assert (tmp_path / "target.txt").read_text() == "the user's own words\n"
        assert probe(live / "x_00000.ts")["frames"] == 10 and not (live / "x_00000.ts").is_symlink()
    assert sorted(p.name for p in live.iterdir()) == ["x.m3u8", "x_00000.ts"]


def test_a_second_render_publishing_to_the_same_playlist_is_refused(tmp_path, long_inputs):
    playlist = tmp_path / "live" / "x.m3u8"
    first = _start_render(long_inputs, tmp_path / "a.mp4", "--publish", str(playlist))
    _stopped_once(first, lambda: (tmp_path / "live" / "x_00000.ts").exists(), "its first segment")
    try:
        second = _render(long_inputs, tmp_path / "b.mp4", "--publish", str(playlist))
    finally:
        first.send_signal(signal.SIGCONT)
    lines = _error_lines(second.stderr)
    assert second.returncode == 2 and len(lines) == 1 and f"is being written by avatargen pid {first.pid}" in lines[0], \
        second.stderr
    assert not (tmp_path / "b.partial.mp4").exists() and not (tmp_path / "b.mp4").exists()
    _, stderr = first.communicate(timeout=120)
    assert first.returncode == 0, stderr
    segments = [playlist.with_name(n) for n in playlist.read_text().splitlines() if n.endswith(".ts")]
    assert len(segments) == 2 and sum(probe(s)["frames"] for s in segments) == probe(tmp_path / "a.mp4")["frames"] == 50


def test_a_playlist_inside_a_resume_folder_is_refused(tmp_path, inputs):
    result = _render(inputs, tmp_path / "o.mp4", "--publish", str(tmp_path / "o.resume" / "x.m3u8"))
    lines = _error_lines(result.stderr)
    assert result.returncode == 2 and len(lines) == 1 and "o.resume" in lines[0], result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("suffix", ["jsonl", "csv"])
def test_an_unclosed_quote_in_a_rows_overrides_fails_that_row_alone(tmp_path, inputs, suffix):
    face, audio = inputs
    bad = "pipeline.n_chunk_frames=8 output.crf='20"
    if suffix == "jsonl":
        jobs = tmp_path / "jobs.jsonl"
        jobs.write_text(json.dumps({"image": str(face), "audio": str(audio), "output": "bad.mp4", "overrides": bad}) + "\n"
                        + json.dumps({"image": str(face), "audio": str(audio), "output": "good.mp4"}) + "\n")  # fmt: skip
    else:
        jobs = tmp_path / "jobs.csv"
        jobs.write_text(f'image,audio,output,overrides\n{face},{audio},bad.mp4,"{bad}"\n{face},{audio},good.mp4,\n')
    out_dir = tmp_path / "out"
    result = run_cli("batch", str(jobs), "--out-dir", str(out_dir), *FAST)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    report = json.loads((out_dir / "batch_report.json").read_text())
    assert [job["status"] for job in report["jobs"]] == ["failed", "ok"]
    line = "line 1" if suffix == "jsonl" else "line 2"  # the CSV's first line is its header
    assert "quot" in report["jobs"][0]["error"] and line in report["jobs"][0]["error"]
    assert probe(out_dir / "good.mp4")["frames"] == 10


def test_batch_overwrite_replaces_a_users_file_and_without_it_the_row_fails(tmp_path, inputs):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / "target.txt").write_text("keep\n")
    (out_dir / "a.lock").symlink_to("target.txt")
    jobs = _write_jobs(tmp_path, inputs, [{"output": "a.mp4"}])
    result = run_cli("batch", str(jobs), "--out-dir", str(out_dir), *FAST)
    assert result.returncode == 2 and (out_dir / "a.lock").is_symlink() and not (out_dir / "a.mp4").exists()
    result = run_cli("batch", str(jobs), "--out-dir", str(out_dir), "--overwrite", "--retry-failed", *FAST)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (out_dir / "target.txt").read_text() == "keep\n" and probe(out_dir / "a.mp4")["frames"] == 10


@pytest.mark.parametrize("name", [".mine.partial.mp4.trim.mp4", ".mine.yaml.tmp", ".mine.joining.mp4", "..mine.joining.mp4.join"])
def test_a_users_folder_at_a_hidden_temporary_name_is_refused_even_with_overwrite(tmp_path, inputs, name):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "keep.txt").write_text("the user's\n")
    result = _render(inputs, tmp_path / "mine.mp4", "--overwrite")
    assert result.returncode == 2 and len(_error_lines(result.stderr)) == 1 and name in result.stderr, result.stderr
    assert (folder / "keep.txt").read_text() == "the user's\n" and not (tmp_path / "mine.mp4").exists()
