#!/usr/bin/env bash
# The README's two commands on other Pythons, each in a fresh virtualenv from a clean copy of this checkout:
# command 1 (install, render the bundled example) whole; command 2's install, then a short part of the suite (the
# whole suite is what .ci/run runs on the machine's own Python).
#
#     bash tests/install/python_versions.sh 3.12 3.13        # pythonX.Y on PATH (pyenv's shims work)
#
# On Python 3.12 and 3.13, 'pip install torch==2.13.0' takes PyPI's CUDA build (about 3 GB with its libraries): run
# it where the network is fast. Prints one line per Python; exit code 0 when every one passed.
set -uo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
status=0
for version in "$@"; do
  work="$(mktemp -d)"
  log="$work/log"
  git -C "$repo" archive --format=tar HEAD | tar -x -C "$work" --one-top-level=src
  (
    set -e
    cd "$work/src"
    "python$version" -m venv "$work/venv"
    source "$work/venv/bin/activate"
    # command 1, as the README has it
    pip install -q torch==2.13.0 && pip install -q -e '.[eval]' && avatargen render --image examples/avatar_1.png --audio examples/speech_1.flac --output out/hello.mp4
    test -s out/hello.mp4
    # command 2's install, then part of the suite (no live/browser tests here)
    pip install -q -e '.[test,eval,oracles]'
    python -m pytest -q -p no:cacheprovider -x tests/cli/test_render.py tests/config tests/face
  ) >"$log" 2>&1
  rc=$?
  echo "python $version: $([[ $rc == 0 ]] && echo passed || echo "FAILED (rc $rc): $(tail -3 "$log" | tr '\n' ' ')") ($(grep -E 'passed|failed' "$log" | tail -1))"
  [[ $rc == 0 ]] || { status=1; cp "$log" "${TMPDIR:-/tmp}/avatargen-python$version.log"; echo "  log: ${TMPDIR:-/tmp}/avatargen-python$version.log"; }
  rm -rf "$work"
done
exit $status
