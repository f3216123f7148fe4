"""One fast seeded run of the override fuzzer (tests/config/override_fuzz.py; the full run: benchmarks/quality/fuzz_overrides.py),
after the cases it and the hand-made ones found: every hostile override ends in exit 0, or exit 2 with one error line,
with no traceback and nothing half-written."""

from __future__ import annotations

from tests.config.override_fuzz import cases, run_case
from tests.conftest import write_face_png, write_speechlike_wav

SEED, COUNT = 24, 30
FOUND = [  # each once exit 1, a traceback, or a partial left behind
    ["seed=-1"], ["pipeline.audio_block_s=.inf"], ["pipeline.sampling_steps=1000000000000"], ["model.a2v.mlp_ratio=.inf"],
    ["model.sr.mlp_ratio=1e300"], ["model.a2v.mlp_ratio=1e-320"], ["output.realtime_buffer_s=1e308", "output.realtime=true"],
    ["model.audio_encoder.hop_length=-160"], ["model.audio_encoder.dim=${seed}"], ["+x=" + "[" * 200 + "]" * 200],
]  # fmt: skip


def test_hostile_overrides_end_in_exit_0_or_one_line_exit_2_and_leave_nothing_half_written(tmp_path):
    face, audio = write_face_png(tmp_path / "face.png"), write_speechlike_wav(tmp_path / "a.wav", 0.4)
    broken = []
    for number, overrides in enumerate(FOUND + cases(SEED, COUNT)):
        folder = tmp_path / f"case{number}"
        folder.mkdir()
        outcome = run_case(overrides, face, audio, folder)
        if not outcome.kept_the_promise:
            broken.append(outcome)
    assert not broken, "\n".join(f"{o.overrides}: exit {o.exit_code}, {[line[:200] for line in o.lines[:3]]}, left {o.left}"
                                  for o in broken)  # fmt: skip
