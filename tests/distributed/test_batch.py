"""`avatargen batch`: jobs from JSONL/CSV, resumable, failures isolated, spread over torchrun ranks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from avatargen.bulk.jobs import read_jobs
from tests.conftest import FAST, run_cli, write_face_png, write_speechlike_wav
from tests.distributed.torchrun import torchrun
from tests.ffmpeg_probe import probe


def make_inputs(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    write_face_png(folder / "face.png")
    write_speechlike_wav(folder / "a.wav", 2.0)


def test_jobs_files_resolve_paths_and_report_bad_rows(tmp_path):
    (tmp_path / "jobs.csv").write_text(
        "image,audio,prompt,output,overrides\n"
        "in/face.png,in/a.wav,smiling,x/one.mp4,pipeline.sampling_steps=2 seed=3\n"
        "in/face.png,,,two.mp4,\n"
    )
    one, two = read_jobs(tmp_path / "jobs.csv", tmp_path / "out")
    assert one.image == tmp_path / "in" / "face.png" and one.output == tmp_path / "out" / "x" / "one.mp4"
    assert one.overrides == ["pipeline.sampling_steps=2", "seed=3"] and one.prompt == "smiling" and one.problem is None
    assert "line 3" in two.problem and "audio" in two.problem
    (tmp_path / "jobs.jsonl").write_text('{"image": "f.png", "audio": "a.wav", "output": "o.mp4", "overrides": ["seed=1"]}\nnot json\n'
                                         '{"image": "f.png", "audio": "a.wav", "output": "o.mp4"}\n')
    first, broken, duplicate = read_jobs(tmp_path / "jobs.jsonl", tmp_path / "out")
    assert first.overrides == ["seed=1"] and first.problem is None
    assert "line 2" in broken.problem and "JSON" in broken.problem
    assert "also the output of job 0" in duplicate.problem


def test_every_output_stays_inside_the_out_dir_and_mistyped_rows_fail_alone(tmp_path):
    rows = [{"image": "f.png", "audio": "a.wav", "output": "../../x.mp4"},
            {"image": "f.png", "audio": "a.wav", "output": str(tmp_path / "elsewhere.mp4")},
            {"image": "f.png", "audio": "a.wav", "output": "ok.mp4", "overrides": 5},
            {"image": 5, "audio": "a.wav", "output": "five.mp4", "overrides": ["seed=1", 2]},
            {"image": "f.png", "audio": "a.wav", "output": "fine/ok.mp4"}]  # fmt: skip
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    up, absolute, bad_overrides, bad_types, fine = read_jobs(jobs, tmp_path / "out")
    assert "'../../x.mp4' is outside --out-dir" in up.problem and "--allow-outside-out-dir" in up.problem
    assert "is outside --out-dir" in absolute.problem
    assert "overrides must be a list of key=value strings, not 5" in bad_overrides.problem
    assert "image must be a string, not int" in bad_types.problem and "overrides must be" in bad_types.problem
    assert fine.problem is None
    assert read_jobs(jobs, tmp_path / "out", allow_outside=True)[0].problem is None


def test_a_publish_override_outside_the_out_dir_fails_that_job_before_it_renders(tmp_path):
    make_inputs(tmp_path / "in")
    jobs = tmp_path / "jobs.jsonl"
    outside = tmp_path / "live" / "x.m3u8"
    jobs.write_text(json.dumps({"image": "in/face.png", "audio": "in/a.wav", "output": "a.mp4",
                                "overrides": [f"output.publish=[{outside}]"]}) + "\n")  # fmt: skip
    from avatargen.bulk.batch import run_batch

    assert run_batch(jobs, tmp_path / "out", FAST, warn=lambda message: None) == 2
    report = json.loads((tmp_path / "out" / "batch_report.json").read_text())
    assert "output.publish target" in report["jobs"][0]["error"] and "outside --out-dir" in report["jobs"][0]["error"]
    assert not (tmp_path / "live").exists() and not (tmp_path / "out" / "a.mp4").exists()


def test_batch_renders_skips_done_outputs_and_isolates_a_bad_job(tmp_path):
    make_inputs(tmp_path / "in")
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text("\n".join(json.dumps(row) for row in [
        {"image": "in/face.png", "audio": "in/a.wav", "output": "a.mp4"},
        {"image": "in/face.png", "audio": "in/missing.wav", "output": "bad.mp4"},
        {"image": "in/face.png", "audio": "in/a.wav", "output": "sub/b.mp4", "prompt": "smiling", "overrides": ["seed=5"]},
    ]) + "\n")  # fmt: skip
    out = tmp_path / "out"
    result = run_cli("batch", str(jobs), "--out-dir", str(out), *FAST, timeout=300)
    assert result.returncode == 2, result.stderr  # the only failure is bad input
    report = json.loads((out / "batch_report.json").read_text())
    assert [j["status"] for j in report["jobs"]] == ["ok", "failed", "ok"]
    assert "missing.wav" in report["jobs"][1]["error"] and report["jobs"][1]["audio"].endswith("missing.wav")
    assert report["jobs"][0]["frames"] == 50 and probe(out / "sub" / "b.mp4")["frames"] == 50
    assert "failed" in result.stdout and "b.mp4" in result.stdout  # the rich summary table
    # Re-running resumes: finished outputs are skipped; the failed job stays failed (OUT.failed.json) unless
    # --retry-failed.
    result = run_cli("batch", str(jobs), "--out-dir", str(out), *FAST, timeout=300)
    report = json.loads((out / "batch_report.json").read_text())
    assert [j["status"] for j in report["jobs"]] == ["skipped", "failed", "skipped"]


def test_batch_spreads_jobs_over_two_ranks_claiming_them_as_they_go(tmp_path):
    make_inputs(tmp_path / "in")
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("image,audio,output\n" + "".join(f"in/face.png,in/a.wav,v{i}.mp4\n" for i in range(3)))
    out = tmp_path / "out"
    (out).mkdir()
    result = torchrun("batch", str(jobs), "--out-dir", str(out), *FAST, timeout=240)
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "batch_report.json").read_text())
    assert report["world_size"] == 2 and report["mode"] == "spread"
    assert [j["status"] for j in report["jobs"]] == ["ok", "ok", "ok"] and {j["rank"] for j in report["jobs"]} <= {0, 1}
    rendered = [line for line in result.stderr.splitlines() if ": job " in line and " ok: " in line]
    assert sorted(line.split(": job ")[1].split()[0] for line in rendered) == ["0", "1", "2"]  # each job once
    assert all(probe(out / f"v{i}.mp4")["frames"] == 50 for i in range(3))


def test_a_pipeline_of_steps_in_a_spread_batch_is_refused_naming_batch_mode_shard(tmp_path):
    """Spread, each rank renders jobs alone: it has no ranks to make pipeline stages of; the fix is shard mode."""
    make_inputs(tmp_path / "in")
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("image,audio,output\nin/face.png,in/a.wav,v.mp4\n")
    out = tmp_path / "out"
    result = torchrun("batch", str(jobs), "--out-dir", str(out), "model=liveavatar_tiny", "model.weights=random",
                      "runtime.pipeline_parallel=2", timeout=120)  # fmt: skip
    assert result.returncode != 0  # torchrun's own: its children exited 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: runtime.pipeline_parallel=2")]
    assert errors and all("set runtime.batch_mode=shard" in line for line in errors), result.stderr[-3000:]
    assert 'avatargen/' not in result.stderr  # no traceback of ours
    assert not (out / "v.mp4").exists()


def test_batch_status_help_is_the_status_forms_and_the_batch_help_points_to_it(tmp_path, monkeypatch):
    # `batch status --help` showed the help of `batch JOBS --out-dir ...`: nothing about the status form.
    from typer.testing import CliRunner

    from avatargen.cli import app

    runner, wide = CliRunner(), {"COLUMNS": "200"}
    for args in (["batch", "status", "--help"], ["batch", "status", "out", "--json", "--help"],
                 ["batch", "--json", "status", "--help"], ["batch", "--out-dir", "out", "status", "--help"]):
        shown = runner.invoke(app, args, env=wide)
        assert shown.exit_code == 0, shown.output
        assert "Usage: avatargen batch status DIR [--json] [storage.KEY=VALUE ...]" in shown.stdout, shown.stdout
        assert "--json" in shown.stdout and "--ray" not in shown.stdout and "--out-dir of a batch" in shown.stdout
    batch = runner.invoke(app, ["batch", "--help"], env=wide)
    assert batch.exit_code == 0 and "--ray" in batch.stdout and "`avatargen batch status --help`" in batch.stdout
    monkeypatch.chdir(tmp_path)
    (tmp_path / "status").write_text("")  # a jobs file named status: the word is JOBS, as when the batch runs
    assert "--ray" in runner.invoke(app, ["batch", "status", "--help"], env=wide).stdout


def test_one_output_named_two_ways_is_a_duplicate_and_status_lists_it_once(tmp_path):
    out = tmp_path / "out"
    (out / "d").mkdir(parents=True)
    (out / "link").symlink_to(out)
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text("".join(json.dumps({"image": "f.png", "audio": "a.wav", "output": name}) + "\n"
                            for name in ("x.mp4", "d/../x.mp4", "link/x.mp4", "y.mp4")))  # fmt: skip
    first, dotted, linked, other = read_jobs(jobs, out)
    assert first.problem is None and other.problem is None
    for line, twin in ((2, dotted), (3, linked)):
        assert twin.problem.startswith(f"jobs.jsonl line {line}: output ") and twin.problem.endswith(
            "is also the output of job 0; give each job its own output")  # fmt: skip
    from avatargen.bulk.local_dir import LocalOutDir
    from avatargen.bulk.status import MANIFEST_NAME
    from avatargen.bulk.batch_files import manifest_chunks
    from avatargen.bulk.jobs import Job

    extra = Job(9, None, None, out / "d" / ".." / "y.mp4")
    LocalOutDir(out).write_side(MANIFEST_NAME, manifest_chunks([first, dotted, linked, other, extra]))
    listed = [state.output for state in LocalOutDir(out).states() if not state.output.startswith("(job")]
    assert sorted(listed) == [str((out / "x.mp4").resolve()), str((out / "y.mp4").resolve())]


def test_jobs_files_with_a_byte_order_mark_parse(tmp_path):
    bom = "\ufeff"
    (tmp_path / "jobs.csv").write_text(bom + "image,audio,output\nf.png,a.wav,one.mp4\n", encoding="utf-8")
    (tmp_path / "jobs.jsonl").write_text(bom + json.dumps({"image": "f.png", "audio": "a.wav", "output": "two.mp4"}) + "\n",
                                         encoding="utf-8")  # fmt: skip
    for name, output in (("jobs.csv", "one.mp4"), ("jobs.jsonl", "two.mp4")):
        (job,) = read_jobs(tmp_path / name, tmp_path / "out")
        assert job.problem is None and job.output == tmp_path / "out" / output and job.image == tmp_path / "f.png"


def test_a_bad_row_is_reported_with_the_fields_it_gives_not_folders(tmp_path):
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text(json.dumps({"audio": "a.wav"}) + "\n")
    from avatargen.bulk.batch import run_batch

    said: list[str] = []
    assert run_batch(jobs, tmp_path / "out", FAST, warn=said.append) == 2
    (line,) = [message for message in said if "job 0 failed" in message]
    assert f"(audio '{tmp_path / 'a.wav'}')" in line and "image '" not in line and "output '" not in line, line
    assert "missing image (or video), output" in line
    report = json.loads((tmp_path / "out" / "batch_report.json").read_text())
    assert report["jobs"][0]["image"] == "" and report["jobs"][0]["output"] == ""


def test_a_jobs_file_where_the_report_goes_is_refused_before_it_is_overwritten(tmp_path):
    from avatargen.bulk.batch import run_batch
    from avatargen.errors import BadInputError

    out = tmp_path / "out"
    out.mkdir()
    jobs = out / "batch_report.json"  # read as JSONL: any name but .csv
    jobs.write_text(json.dumps({"image": "f.png", "audio": "a.wav", "output": "x.mp4"}) + "\n")
    before = jobs.read_bytes()
    with pytest.raises(BadInputError, match="is the input .*batch_report.json'; writing it would destroy the input"):
        run_batch(jobs, out, FAST, warn=lambda message: None)
    assert jobs.read_bytes() == before


def test_rows_that_dub_a_video_or_give_two_speakers(tmp_path):
    """The row forms of --video, -a twice, --person-box and --audio-type (JSONL lists, CSV ';'), rendered."""
    import subprocess

    from avatargen.bulk.batch import run_batch
    from avatargen.io.ffmpeg import ffmpeg_exe

    make_inputs(tmp_path / "in")
    write_speechlike_wav(tmp_path / "in" / "b.wav", 0.3)
    write_speechlike_wav(tmp_path / "in" / "short.wav", 0.5)
    subprocess.run([ffmpeg_exe(), "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc=size=96x96:rate=25:duration=0.4",
                    "-pix_fmt", "yuv420p", str(tmp_path / "in" / "src.mp4")], check=True)  # fmt: skip
    (tmp_path / "jobs.csv").write_text(
        "image,audio,output,person_boxes,audio_type\n"
        "in/face.png,in/short.wav;in/b.wav,csv.mp4,\"0,0,150,300;150,0,300,300\",add\n"
    )
    (csv_job,) = read_jobs(tmp_path / "jobs.csv", tmp_path / "out")
    assert csv_job.problem is None and csv_job.extra_audio == (tmp_path / "in" / "b.wav",) and csv_job.audio_type == "add"
    assert csv_job.person_boxes == ((0, 0, 150, 300), (150, 0, 300, 300))
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text("\n".join(json.dumps(row) for row in [
        {"video": "in/src.mp4", "audio": "in/short.wav", "output": "dub.mp4"},
        {"image": "in/face.png", "audio": ["in/short.wav", "in/b.wav"], "output": "two.mp4", "audio_type": "add",
         "person_boxes": [[0, 0, 150, 300], [150, 0, 300, 300]]},
        {"image": "in/face.png", "audio": ["in/short.wav", "in/b.wav"], "output": "bad.mp4",
         "person_boxes": [[0, 0, 150, 300]]},
    ]) + "\n")  # fmt: skip
    out = tmp_path / "out"
    code = run_batch(jobs, out, ["model=wan_tiny", "model.wan.sampling_steps=1", *FAST], warn=lambda _: None)
    report = json.loads((out / "batch_report.json").read_text())
    assert code == 2 and [j["status"] for j in report["jobs"]] == ["ok", "ok", "failed"]
    assert "1 --person-box for 2 audio file" in report["jobs"][2]["error"]
    assert probe(out / "dub.mp4")["frames"] == 13 and probe(out / "two.mp4")["frames"] == 20  # 0.5 s, then 0.3 s
