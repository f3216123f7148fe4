"""One fast seeded run of the override fuzzer (tests/config/override_fuzz.py; the full run: benchmarks/fuzz_overrides.py):
every hostile override ends in exit 0, or exit 2 with one error line, with no traceback and nothing half-written."""

from __future__ import annotations

from tests.config.override_fuzz import cases, run_case
from tests.conftest import write_face_png, write_speechlike_wav

SEED, COUNT = 24, 30


def test_hostile_overrides_end_in_exit_0_or_one_line_exit_2_and_leave_nothing_half_written(tmp_path):
    face, audio = write_face_png(tmp_path / "face.png"), write_speechlike_wav(tmp_path / "a.wav", 0.4)
    broken = []
    for number, overrides in enumerate(cases(SEED, COUNT)):
        folder = tmp_path / f"case{number}"
        folder.mkdir()
        outcome = run_case(overrides, face, audio, folder)
        if not outcome.kept_the_promise:
            broken.append(outcome)
    assert not broken, "\n".join(f"{o.overrides}: exit {o.exit_code}, {o.lines}, left {o.left}" for o in broken)
