"""Start-up cost of a CLI run: a render never imports ``torch._dynamo`` (about a second on these machines), a request
refused for a bad path or option never imports torch at all (1.5-3 s), and validating a config of any family imports
neither torch nor transformers (several seconds).

Building a model on the meta device used to run its initialisers and sin-cos tables through torch's Python meta
kernels, whose first call imports ``torch._dynamo``; config validation and the placement pass both paid for it on
every ``avatargen render`` (docs/performance.md, "Start-up time").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, write_speechlike_wav

# Runs the real CLI in-process; as it exits (an atexit handler: the CLI leaves without the interpreter's teardown),
# reports which torch compiler packages it imported, and whether it imported torch and rich.
DRIVER = """
import atexit, json, runpy, sys

def report():
    loaded = sorted(m for m in sys.modules if m.split(".")[:2] == ["torch", "_dynamo"])
    print(json.dumps({"dynamo": loaded[:3], "torch": "torch" in sys.modules, "rich": "rich" in sys.modules}),
          file=sys.__stderr__, flush=True)

atexit.register(report)
sys.argv = ["avatargen", *sys.argv[1:]]
runpy.run_module("avatargen", run_name="__main__")
"""


def _run_cli(args: list[str]) -> tuple[subprocess.CompletedProcess, list[str], dict]:
    """The CLI run with ``args`` under ``DRIVER``: the process, its stderr lines before the report, and the report."""
    result = subprocess.run([sys.executable, "-c", DRIVER, *args], capture_output=True, text=True, timeout=120,
                            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    *lines, report = result.stderr.strip().splitlines()
    return result, lines, json.loads(report)


def test_a_quiet_render_with_the_shipped_model_imports_neither_torch_dynamo_nor_rich(tmp_path, face_png) -> None:
    audio = write_speechlike_wav(tmp_path / "a.wav", 0.5)
    out = tmp_path / "out.mp4"
    args = ["render", "-i", str(face_png), "-a", str(audio), "-o", str(out), "--quiet", "runtime.threads=1"]
    result, _, report = _run_cli(args)
    assert result.returncode == 0 and out.stat().st_size > 0, result.stderr
    assert report["dynamo"] == [], f"a render imported {report['dynamo']} (~1 s of start-up)"
    assert report["rich"] is False, "a render without its progress bar imported rich (~0.02 s)"



def test_a_photo_rendered_with_its_speech_imports_no_torch_and_a_cartoon_does(tmp_path) -> None:
    """A photograph whose speech drives its mouth reads none of the model's frames: no model is built, and torch
    (about a second of the time to the first frame) is never imported; its video is the one the models gave
    (tests/render/test_photo_runs_no_model.py). A cartoon needs its models, and torch."""
    from tests.eval import clips

    audio = write_speechlike_wav(tmp_path / "a.wav", 0.5)
    photo = clips.write_png(tmp_path / "astronaut.png", clips.astronaut())
    cartoon = REPO / "examples" / "avatar_1.png"
    for picture, imports_torch in ((photo, False), (cartoon, True)):
        out = tmp_path / f"{picture.stem}.mp4"
        result, _, report = _run_cli(["render", "-i", str(picture), "-a", str(audio), "-o", str(out), "--quiet"])
        assert result.returncode == 0 and out.stat().st_size > 0, result.stderr
        assert report["torch"] is imports_torch, f"{picture.name}: torch imported: {report['torch']}"


@pytest.mark.parametrize("problem, says", [
    ("image", "image file '{image}' does not exist; check the path"),
    ("audio", "audio file '{audio}' does not exist; check the path"),
    ("output", "is a file avatargen did not write; this render would replace it"),
])  # fmt: skip
def test_a_bad_path_is_refused_before_torch_is_imported(tmp_path: Path, face_png: Path, problem: str, says: str) -> None:
    # a shell script's typo is said in half a second, not after importing torch; the same line as the render's own
    audio, out = write_speechlike_wav(tmp_path / "a.wav", 0.5), tmp_path / "out.mp4"
    image = face_png
    if problem == "image":
        image = tmp_path / "missing.png"
    elif problem == "audio":
        audio = tmp_path / "missing.wav"
    else:
        out.write_bytes(b"a user's own file")
    args = ["render", "-i", str(image), "-a", str(audio), "-o", str(out), "--quiet"]
    result, lines, report = _run_cli(args)
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and says.format(image=image, audio=audio) in lines[0], result.stderr
    assert report["torch"] is False, "a refused request imported torch"
    assert out.read_bytes() == b"a user's own file" if problem == "output" else not out.exists()


def test_a_missing_jobs_file_is_refused_before_torch_is_imported(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.jsonl"
    args = ["batch", str(jobs), "--out-dir", str(tmp_path / "out")]
    result, lines, report = _run_cli(args)
    assert result.returncode == 2 and lines == [f"error: jobs file '{jobs}' could not be read (No such file or "
                                                "directory); give a JSONL or CSV file"], result.stderr  # fmt: skip
    assert report["torch"] is False, "a refused batch imported torch"


@pytest.mark.parametrize("command, says", [
    (["weights", "check", "{tmp}/weights", "model=infinitetalk"],
     "error: '{tmp}/weights' is not a folder; give the weights/ folder (docs/models.md)"),
    (["weights", "check", "{tmp}/ckpt", "model=liveavatar"],  # LiveAvatar's folder is ckpt/, its doc its own
     "error: '{tmp}/ckpt' is not a folder; give the ckpt/ folder (docs/liveavatar.md)"),
    (["train", "--out", "{tmp}/trained", "--family", "wan2"],
     "error: model.family 'wan2' is not a model family; known families: liveavatar, tiny, wan"),
    (["train", "--out", "{tmp}/trained", "bogus.key=1"],
     "error: training config: Key 'bogus' not in 'RecipeConfig'"),
    (["train", "--out", "{tmp}/trained", "clip_seconds=0"],  # failed after ~30 s of training
     "error: training config: clip_seconds=0 gives 0 frames; the A2V phases cut windows of 18: give clip_seconds "
     ">= 0.72"),
    (["train", "--out", "{tmp}/trained", "--family", "wan"],
     "error: the 'wan' family has no training recipe here; train the default model's family: leave --family out"),
    (["train", "--out", "{tmp}/used"],  # a run truncated its log and replaced its files at once
     "error: --out '{tmp}/used' is not empty; a run writes its checkpoint there (model.yaml, five .safetensors, "
     "train_log.jsonl, summary.json, recipe.yaml) and replaces what is at those names: give a new or empty folder, "
     "or pass --overwrite"),
    (["train", "--out", "{tmp}/a_file/sub"],
     "error: --out '{tmp}/a_file/sub' cannot be made: '{tmp}/a_file' is a file; give a folder"),
])  # fmt: skip
def test_a_weights_check_or_training_run_refused_for_its_arguments_never_imports_torch(
    tmp_path: Path, command: list[str], says: str
) -> None:
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "vae.safetensors").write_text("the user's weights")
    (tmp_path / "a_file").write_text("a file")
    args = [part.format(tmp=tmp_path) for part in command]
    result, lines, report = _run_cli(args)
    assert result.returncode == 2 and lines == [says.format(tmp=tmp_path)], result.stderr
    assert report["torch"] is False, f"a refused {command[0]} imported torch"
    assert (tmp_path / "used" / "vae.safetensors").read_text() == "the user's weights"


def test_checking_a_config_of_any_family_imports_neither_torch_nor_transformers() -> None:
    # `avatargen config model=...`, `avatargen weights check` and each `avatargen batch` job row validate against the
    # families' specs (torch-free params.py); torch (1.5 s) and transformers (seconds) come when a model is built.
    names = ("tiny", "wan_tiny", "infinitetalk", "multitalk", "liveavatar", "liveavatar_tiny")
    code = ("import sys; from avatargen.config.loader import load_config, to_config; "
            f"[to_config(load_config([f'model={{name}}'])) for name in {names}]; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers'))[:3])")  # fmt: skip
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", result.stdout


def test_an_opencv_that_cannot_load_is_refused_in_one_line_with_its_fix(tmp_path) -> None:
    # e.g. a GUI build of OpenCV (another package's) over the headless one, on a machine without libGL
    audio = write_speechlike_wav(tmp_path / "a.wav", 0.5)
    out = tmp_path / "out.mp4"
    code = ("import runpy, sys; sys.modules['cv2'] = None; sys.argv = ['avatargen', *sys.argv[1:]]; "
            "runpy.run_module('avatargen', run_name='__main__')")  # fmt: skip
    args = ["render", "-i", str(REPO / "examples" / "avatar_1.png"), "-a", str(audio), "-o", str(out)]
    result = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120,
                            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith("error: OpenCV cannot be imported") and "opencv-python-headless>=5" in lines[0]
    assert not out.exists()
