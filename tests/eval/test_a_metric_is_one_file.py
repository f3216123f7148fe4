"""A new metric is one file: this one (how many seconds of the video show a face) joins ``avatargen eval`` with no
edit to avatargen, registered in the process (``register_metric``) or named by an ``avatargen.metrics`` entry point
of an installed package."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("dlib", reason="the evaluator needs avatargen[eval]")

from avatargen.eval.context import EvalContext, Frame  # noqa: E402
from avatargen.eval.face_track import TrackedFace  # noqa: E402
from avatargen.eval.metric import Metric, Rows  # noqa: E402
from tests.conftest import REPO  # noqa: E402


class FaceSeconds(Metric):
    """``face_seconds``: the seconds of video in which the tracker found a face."""

    def __init__(self, context: EvalContext) -> None:
        self.fps = context.fps
        self.frames = 0

    def update(self, frame: Frame, face: TrackedFace | None) -> None:
        self.frames += face is not None

    def summary(self) -> dict[str, Any]:
        return {"face_seconds": round(self.frames / self.fps, 2)}

    @staticmethod
    def rows(result: dict[str, Any]) -> Rows:
        if "face_seconds" not in result:
            return []
        return [("face seconds", f"{result['face_seconds']:.1f} s of {result['duration_s']:.1f} s show a face")]


@pytest.fixture(scope="module")
def talk(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A 2-s talking clip of a photograph (a face in every frame) and its audio."""
    from tests.eval import clips

    folder = tmp_path_factory.mktemp("talk")
    audio, openness = clips.speech(2.0)
    return (clips.write_mp4(folder / "talk.mp4", clips.talking_frames(openness)),
            clips.write_wav(folder / "talk.wav", audio))  # fmt: skip


def test_a_registered_metric_gives_its_key_and_its_report_row(talk: tuple[Path, Path]) -> None:
    from avatargen.eval import evaluate_video, format_report, register_metric, unregister_metric

    register_metric(FaceSeconds)
    try:
        result = evaluate_video(*talk)
        report = format_report(result)
    finally:
        unregister_metric(FaceSeconds)
    assert result["face_seconds"] == 2.0 and result["face_found"] == 1.0  # fed every frame, with the tracker's face
    rows = [line for line in report.splitlines() if not line.startswith("note: ")]
    assert rows[-1] == "face seconds  2.0 s of 2.0 s show a face"  # after the built-in metrics' rows
    assert "face seconds" not in format_report(result)  # unregistered: its row is gone


def test_an_entry_point_of_another_package_adds_the_metric_to_avatargen_eval(talk: tuple[Path, Path], tmp_path) -> None:
    # An installed package's metadata, as pip writes it, naming the metric above in the avatargen.metrics group.
    package = tmp_path / "site" / "face_seconds_metric-1.0.dist-info"
    package.mkdir(parents=True)
    (package / "METADATA").write_text("Metadata-Version: 2.1\nName: face-seconds-metric\nVersion: 1.0\n")
    (package / "entry_points.txt").write_text(
        "[avatargen.metrics]\nface_seconds = tests.eval.test_a_metric_is_one_file:FaceSeconds\n"
    )
    video, audio = talk
    result = subprocess.run(
        [sys.executable, "-m", "avatargen", "eval", str(video), "-a", str(audio)], capture_output=True, text=True,
        cwd=REPO, env={"PYTHONPATH": f"{REPO}:{tmp_path / 'site'}", "PATH": "/usr/bin:/bin"}, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "face seconds  2.0 s of 2.0 s show a face" in result.stdout.splitlines(), result.stdout
