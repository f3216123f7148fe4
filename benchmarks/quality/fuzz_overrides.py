"""The override fuzzer's full run: COUNT seeded cases (tests/config/override_fuzz.py), each a real render through the
CLI; prints the exit codes and every case that broke the promise (exit 0, or exit 2 with one error line, no traceback,
nothing half-written). Exit status 1 if any did.

    python benchmarks/quality/fuzz_overrides.py [--seed 1] [--count 800]
"""

from __future__ import annotations

import argparse
import collections
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.config.override_fuzz import cases, run_case  # noqa: E402
from tests.conftest import write_face_png, write_speechlike_wav  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--count", type=int, default=800)
    args = parser.parse_args()
    started = time.perf_counter()
    codes: collections.Counter[int] = collections.Counter()
    broken = 0
    with tempfile.TemporaryDirectory() as tmp:
        face, audio = write_face_png(Path(tmp) / "face.png"), write_speechlike_wav(Path(tmp) / "a.wav", 0.4)
        for number, overrides in enumerate(cases(args.seed, args.count)):
            folder = Path(tmp) / f"case{number}"
            folder.mkdir()
            outcome = run_case(overrides, face, audio, folder)
            codes[outcome.exit_code] += 1
            if not outcome.kept_the_promise:
                broken += 1
                print(f"BROKEN {[o[:80] for o in overrides]}: exit {outcome.exit_code}, {outcome.lines}, left {outcome.left}")
            shutil.rmtree(folder)
    print(f"{args.count} cases (seed {args.seed}) in {time.perf_counter() - started:.0f} s: exit codes "
          f"{dict(sorted(codes.items()))}, {broken} broke the promise")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
