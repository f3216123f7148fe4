#!/usr/bin/env bash
# What the tests need beyond pip: Debian's espeak-ng (the speech that tests/compose and tests/data time phonemes
# against), Chromium (plays tests/live's HLS stream headless) and hls.js (its HLS player, installed into
# tests/live/node_modules, git-ignored). Safe to rerun; installs only what is missing. Without espeak-ng its tests skip;
# without the browser tests/live fails, naming this script.
set -euo pipefail
cd "$(dirname "$0")/live"
apt_install() {  # apt-get update only when the package lists are too old to install from
  export DEBIAN_FRONTEND=noninteractive
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get install -y -q "$@" >/dev/null || { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q "$@" >/dev/null; }
}
command -v espeak-ng >/dev/null 2>&1 || apt_install espeak-ng
[ -x /usr/bin/chromium ] || apt_install chromium
command -v npm >/dev/null 2>&1 || apt_install npm
[ -f node_modules/hls.js/dist/hls.min.js ] ||
  npm install --prefix . --no-save --no-package-lock --no-audit --no-fund --loglevel=error hls.js@1.7.4
