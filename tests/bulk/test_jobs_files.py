"""Jobs files a batch must survive (pipes, devices, huge or deeply nested rows) and the side files it must not take
from a user."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from avatargen.bulk.jobs import MAX_LINE_BYTES, read_jobs
from avatargen.errors import BadInputError
from tests.conftest import FAST, REPO, run_cli, write_face_png, write_speechlike_wav


def _one_line_error(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_a_fifo_a_device_or_a_folder_as_the_jobs_file_is_refused_at_once_in_one_line(tmp_path):
    fifo = tmp_path / "jobs.jsonl"
    os.mkfifo(fifo)
    folder = tmp_path / "jobs"
    folder.mkdir()
    # nobody writes the pipe: opening it plainly would block for ever; a folder failed as "unexpected IsADirectoryError"
    for jobs in (fifo, Path("/dev/zero"), folder):
        line = _one_line_error(run_cli("batch", str(jobs), "--out-dir", str(tmp_path / "out"), *FAST, timeout=60))
        assert "is not a regular file" in line and "give a JSONL or CSV file" in line, line


@pytest.mark.parametrize("name, text", [("jobs.jsonl", ""), ("jobs.jsonl", "\n  \n\n"), ("jobs.jsonl", "# later\n"),
                                        ("jobs.csv", ""), ("jobs.csv", "image,audio,output\n\n")],
                         ids=["empty jsonl", "blank lines", "a comment", "empty csv", "a csv header"])  # fmt: skip
def test_a_jobs_file_of_no_job_is_one_line_and_exit_2_and_writes_nothing(tmp_path, name, text):
    # It was a batch of 0 jobs, exit 0, its report written: a wrong or truncated file passed for a finished batch.
    jobs = tmp_path / name
    jobs.write_text(text)
    line = _one_line_error(run_cli("batch", str(jobs), "--out-dir", str(tmp_path / "out"), *FAST, timeout=60))
    what = ("a header and no row under it", "one row per job under the header") if name.endswith(".csv") else (
        "only blank and # lines", "one JSON object a line, one per job")  # fmt: skip
    assert line == f"error: jobs file '{jobs}' holds no jobs (empty, or {what[0]}); give {what[1]} (docs/batch.md)"
    assert not (tmp_path / "out").exists()
    with pytest.raises(BadInputError, match="holds no jobs"):
        read_jobs(jobs, tmp_path / "out")


def test_an_over_long_line_and_a_deeply_nested_row_fail_alone(tmp_path):
    jobs = tmp_path / "jobs.jsonl"
    good = json.dumps({"image": "f.png", "audio": "a.wav", "output": "ok.mp4"})
    with jobs.open("w") as rows:
        rows.write(
            json.dumps({"image": "f.png", "audio": "a.wav", "output": "big.mp4", "prompt": "x" * (MAX_LINE_BYTES + 10)})
            + "\n"
        )
        rows.write("[" * 100_000 + "]" * 100_000 + "\n")
        rows.write('{"a": ' * 5000 + "1" + "}" * 5000 + "\n")
        rows.write(good + "\n")
    big, brackets, nested, fine = read_jobs(jobs, tmp_path / "out")
    assert "line 1: longer than 1 MiB" in big.problem
    assert "line 2:" in brackets.problem and "line 3:" in nested.problem
    assert fine.problem is None and fine.output == tmp_path / "out" / "ok.mp4"


def test_a_csv_row_with_more_fields_than_its_header_is_a_bad_row_not_a_silently_shorter_one(tmp_path):
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("image,audio,prompt,output,overrides\nf.png,a.wav,,v.mp4,seed=1,extra\nf.png,a.wav,,w.mp4,seed=1\n")
    shifted, fine = read_jobs(jobs, tmp_path / "out")
    assert shifted.problem == "jobs.csv line 2: 6 fields under a header of 5; quote a field that holds a comma"
    assert fine.problem is None


def test_an_output_that_is_not_mp4_is_a_bad_row_and_does_not_fail_the_mp4_of_the_same_name(tmp_path):
    write_face_png(tmp_path / "face.png")
    write_speechlike_wav(tmp_path / "a.wav", 0.4)
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text(
        "".join(
            json.dumps({"image": "face.png", "audio": "a.wav", "output": name}) + "\n" for name in ("x.mov", "x.mp4")
        )
    )
    from avatargen.bulk.batch import run_batch

    said: list[str] = []
    assert run_batch(jobs, tmp_path / "out", FAST, warn=said.append) == 2
    report = json.loads((tmp_path / "out" / "batch_report.json").read_text())
    assert [j["status"] for j in report["jobs"]] == ["failed", "ok"], said
    assert "must end in .mp4" in report["jobs"][0]["error"] and not (tmp_path / "out" / "x.failed.json").exists()


def test_a_users_files_at_the_batch_side_names_are_refused_unless_overwrite(tmp_path):
    write_face_png(tmp_path / "face.png")
    write_speechlike_wav(tmp_path / "a.wav", 0.4)
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text(json.dumps({"image": "face.png", "audio": "a.wav", "output": "x.mp4"}) + "\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "batch_report.json").write_text("my own notes\n")
    line = _one_line_error(run_cli("batch", str(jobs), "--out-dir", str(out), *FAST))
    assert "batch_report.json' is not a file avatargen batch wrote" in line and "--overwrite" in line
    assert (out / "batch_report.json").read_text() == "my own notes\n" and not (out / "x.mp4").exists()
    (out / "batch_report.json").unlink()
    (out / "x.failed.json").write_text('{"mine": true}\n')  # a user's file where the job records a failure
    result = run_cli("batch", str(jobs), "--out-dir", str(out), *FAST)
    report = json.loads((out / "batch_report.json").read_text())
    assert result.returncode == 2 and "x.failed.json' is not a file avatargen batch wrote" in report["jobs"][0]["error"]
    assert (out / "x.failed.json").read_text() == '{"mine": true}\n' and not (out / "x.mp4").exists()
    assert run_cli("batch", str(jobs), "--out-dir", str(out), "--overwrite", *FAST).returncode == 0
    assert (out / "x.mp4").is_file()


def test_a_users_file_at_a_jobs_output_is_kept_as_finished_and_overwrite_renders_over_it(tmp_path):
    """A file at OUT.mp4 is the job's finished video (one from before avatargen marked its files carries no mark);
    with --overwrite only avatargen's own is: a user's file is rendered over, and a job that failed for a name it
    would replace (a user's folder at OUT.resume) is tried again, --overwrite being what its error said to pass."""
    from avatargen.io.owned_names import is_avatargen_mp4

    write_face_png(tmp_path / "face.png")
    write_speechlike_wav(tmp_path / "a.wav", 0.4)
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text("".join(json.dumps({"image": "face.png", "audio": "a.wav", "output": f"{n}.mp4"}) + "\n"
                            for n in ("x", "y")))  # fmt: skip
    out = tmp_path / "out"
    (out / "y.resume").mkdir(parents=True)
    (out / "y.resume" / "mine.txt").write_text("my notes")
    (out / "x.mp4").write_text("my video")
    first = run_cli("batch", str(jobs), "--out-dir", str(out), *FAST)
    report = json.loads((out / "batch_report.json").read_text())
    assert first.returncode == 2 and [j["status"] for j in report["jobs"]] == ["skipped", "failed"], first.stderr
    assert "or pass --overwrite to replace it" in report["jobs"][1]["error"] and (out / "x.mp4").read_text() == "my video"
    assert run_cli("batch", str(jobs), "--out-dir", str(out), "--overwrite", *FAST).returncode == 0
    report = json.loads((out / "batch_report.json").read_text())
    assert [j["status"] for j in report["jobs"]] == ["ok", "ok"] and all(is_avatargen_mp4(out / f"{n}.mp4") for n in "xy")


def test_ray_missing_is_one_line_with_the_install_command(tmp_path):
    hidden = tmp_path / "no_ray"
    (hidden / "ray").mkdir(parents=True)
    (hidden / "ray" / "__init__.py").write_text("raise ImportError('No module named ray')\n")  # as if not installed
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text(json.dumps({"image": "f.png", "audio": "a.wav", "output": "x.mp4"}) + "\n")
    env = {**os.environ, "PYTHONPATH": f"{hidden}:{REPO}"}
    line = _one_line_error(run_cli("batch", str(jobs), "--out-dir", str(tmp_path / "out"), "--ray", *FAST, env=env))
    assert "pip install 'avatargen[ray]'" in line, line
