#!/usr/bin/env bash
# What tests/live needs beyond pip: Debian's Chromium (plays the HLS stream headless) and hls.js (its HLS player,
# installed into tests/live/node_modules, git-ignored). Safe to rerun; installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")"
apt_install() {  # apt-get update only when the package lists are too old to install from
  export DEBIAN_FRONTEND=noninteractive
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get install -y -q "$@" >/dev/null || { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q "$@" >/dev/null; }
}
[ -x /usr/bin/chromium ] || apt_install chromium
command -v npm >/dev/null 2>&1 || apt_install npm
[ -f node_modules/hls.js/dist/hls.min.js ] ||
  npm install --prefix . --no-save --no-package-lock --no-audit --no-fund --loglevel=error hls.js@1.7.4
