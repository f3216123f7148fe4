#!/usr/bin/env bash
# Render every bundled avatar with every bundled speech clip: a bulk script to copy and adapt.
# Usage: examples/render_all.sh [OUT_DIR] [override ...]     e.g. examples/render_all.sh out pipeline=preview
# One failed render does not stop the others; the exit code is 0 only if all succeeded.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-out}"; shift || true
mkdir -p "$out"
failed=0
for image in "$here"/avatar_*.png; do
  for audio in "$here"/speech_*.flac; do
    name="$(basename "$image" .png)-$(basename "$audio" .flac)"
    if [[ -f "$out/$name.mp4" ]]; then echo "skip $name (done)"; continue; fi
    if avatargen render --image "$image" --audio "$audio" --output "$out/$name.mp4" --quiet --json "$@" > "$out/$name.json"; then
      echo "ok   $name"
    else
      echo "FAIL $name (exit $?)"; failed=$((failed + 1))
    fi
  done
done
echo "$failed failed"
[[ $failed -eq 0 ]]
