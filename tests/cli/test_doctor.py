"""`avatargen doctor` tells the truth about this machine, names the pip command for an extra that does not import,
and exits 2 with the reason when ffmpeg cannot write an MP4; `avatargen --version`."""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import numpy
import torch
from typer.testing import CliRunner

import avatargen
from avatargen.cli import app
from avatargen.doctor import check_ffmpeg, diagnose
from avatargen.face.hog_cache import cache_folder
from avatargen.face.picture_cache import pictures_folder
from avatargen.io.ffmpeg import ffmpeg_exe
from avatargen.runtime.numa import numa_nodes
from avatargen.runtime.precision import choose_precision
from avatargen.stages.reference_cache import references_folder
from tests.conftest import REPO, run_cli


def test_doctor_reports_what_this_machine_has_and_that_a_default_render_works(tmp_path):
    report = diagnose(tmp_path / "not" / "yet")  # a render creates missing folders: the nearest existing one counts
    assert report.ok, report.problems
    v = report.versions
    assert (v["avatargen"], v["python"], v["torch"], v["numpy"]) == (
        avatargen.__version__, platform.python_version(), torch.__version__, numpy.__version__)  # fmt: skip
    assert v["torch_cuda"] == torch.version.cuda
    said = subprocess.run([ffmpeg_exe(), "-version"], capture_output=True, text=True).stdout
    assert report.ffmpeg["path"] == ffmpeg_exe() and f"ffmpeg version {v['ffmpeg']} " in said
    assert report.ffmpeg["encoders"] == {"libx264": True, "aac": True}  # what every render here uses
    assert len(report.gpus) == (torch.cuda.device_count() if torch.cuda.is_available() else 0)
    assert report.precision["cpu"]["auto"] == choose_precision("auto", torch.device("cpu")).describe()
    assert report.precision["cpu"]["bf16_vs_fp32"] > 0 and report.precision["cpu"]["fp16_vs_fp32"] > 0
    for row in report.extras:  # installed as this suite is (README: the test, eval and oracles extras)
        assert row["works"] == _importable(row["module"]), row
        assert row["install"] == f"pip install 'avatargen[{row['extra']}]'" and row["enables"]
    # Every extra a user installs is reported, each by the packages it installs (test and bench serve the repository).
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {row["extra"] for row in report.extras} == set(declared) - {"test", "bench"}
    for row in report.extras:
        assert any(re.match(rf"{re.escape(row['distribution'])}\b", need) for need in declared[row["extra"]]), row
    assert [node["node"] for node in report.numa] == numa_nodes()
    assert [cache["path"] for cache in report.caches] == [str(cache_folder()), str(pictures_folder()), str(references_folder())]
    assert report.disk["checked"] == str(tmp_path) and report.disk["writable"]
    assert abs(report.disk["free_bytes"] - shutil.disk_usage(tmp_path).free) < 2**30
    assert report.default_render["model"] == "tiny" and Path(report.default_render["checkpoint"]).is_dir()


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a dotted name whose package is missing (livekit.agents)
        return False


def test_doctor_json_and_exit_code_and_version():
    runner = CliRunner()
    done = runner.invoke(app, ["doctor", "--json"])
    assert done.exit_code == 0, done.output
    found = json.loads(done.stdout)
    assert found["ok"] is True and found["problems"] == []
    assert {"versions", "gpus", "precision", "ffmpeg", "extras", "numa", "caches", "disk"} <= set(found)
    version = runner.invoke(app, ["--version"])
    assert version.exit_code == 0 and version.stdout == f"avatargen {avatargen.__version__}\n"


def test_doctor_names_the_pip_command_for_an_eval_extra_that_does_not_import(tmp_path):
    # A dlib.py first on the path that fails to import: what a broken or mismatched dlib build looks like.
    (tmp_path / "dlib.py").write_text('raise ImportError("this dlib build does not load")\n')
    result = run_cli("doctor", env_extra={"PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"})
    assert result.returncode == 0, result.stderr  # the default render centre-crops without it, with a warning
    extra = next(line for line in result.stdout.splitlines() if line.startswith("extra eval"))
    assert "dlib-bin" in extra and "does not import (ImportError: this dlib build does not load)" in extra
    assert extra.endswith("pip install 'avatargen[eval]'")
    assert "warning: dlib-bin does not work here, so references are centre-cropped instead of framed on their face" in result.stdout


def test_doctor_says_what_the_webrtc_s3_ray_and_livekit_extras_enable_and_how_to_install_them(tmp_path):
    # They were not listed at all: a user could not tell from doctor why --publish webrtc:// or s3:// was refused.
    for module in ("aiortc", "boto3", "ray", "livekit"):  # each of these extras' packages, as if it did not load
        (tmp_path / module).mkdir()
        (tmp_path / module / "__init__.py").write_text(f'raise ImportError("no {module} here")\n')
    result = run_cli("doctor", env_extra={"PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"})
    assert result.returncode == 0, result.stderr  # a default render needs none of them: no problem, no warning
    lines = {line.split()[1]: line for line in result.stdout.splitlines() if line.startswith("extra ")}
    for extra, package, enables in (("webrtc", "aiortc", "--publish webrtc://"), ("s3", "boto3", "s3:// inputs"),
                                    ("ray", "ray", "avatargen batch --ray"),
                                    ("livekit", "livekit-agents", "avatargen.agents.livekit")):  # fmt: skip
        line = lines[extra]
        said = f"does not import (ImportError: no {package.split('-')[0]} here)"
        assert f"{package} not installed" in line or said in line, line
        assert f"; for {enables}" in line and line.endswith(f"; pip install 'avatargen[{extra}]'"), line
    assert "aiohttp" in lines["webrtc"] and "warning" not in result.stdout


def test_doctor_exits_2_with_the_reason_when_ffmpeg_cannot_run(tmp_path):
    broken = tmp_path / "ffmpeg"
    broken.write_text("#!/bin/sh\nexit 0\n")  # not executable
    result = run_cli("doctor", env_extra={"IMAGEIO_FFMPEG_EXE": str(broken)})
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: ffmpeg '{broken}' does not run: not executable (permission denied); unset "
                      "IMAGEIO_FFMPEG_EXE or point it to a working ffmpeg"], result.stderr  # fmt: skip
    assert "Traceback" not in result.stderr and "a default render will NOT work here" in result.stdout


def test_an_ffmpeg_without_libx264_and_aac_is_a_problem(tmp_path, monkeypatch):
    bare = tmp_path / "ffmpeg"  # runs, answers -version, lists only an MPEG-4 Part 2 encoder
    bare.write_text('#!/bin/sh\nif [ "$1" = -version ]; then echo "ffmpeg version 6.1-bare"; exit 0; fi\n'
                    'echo " V....D mpeg4                MPEG-4 part 2"\n')  # fmt: skip
    bare.chmod(0o755)
    monkeypatch.setenv("IMAGEIO_FFMPEG_EXE", str(bare))
    found = check_ffmpeg()
    assert found["version"] == "6.1-bare" and found["encoders"] == {"libx264": False, "aac": False}
    assert found["problems"] == [f"ffmpeg '{bare}' has no libx264 and no aac encoder (an MP4 needs H.264 video and "
                                 "AAC audio); unset IMAGEIO_FFMPEG_EXE or point it to a working ffmpeg"]  # fmt: skip
