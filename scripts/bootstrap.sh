#!/usr/bin/env bash
# Idempotent development setup: Debian packages systemd-python needs (and the headless
# Chromium + chromedriver the console tests drive), a venv in .venv, the agent installed
# editable with its test and systemd extras.
# Usage: scripts/bootstrap.sh            (prints the venv's python path last)
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for pkg in libsystemd-dev pkg-config systemd; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null; then SUDO="sudo"; else
    echo "bootstrap: need Debian packages ${need[*]} (run as root or install sudo)" >&2; exit 1; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >&2
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
fi
# Headless Chromium + chromedriver for the console tests (tests/console): best effort, so a
# distribution without these package names still runs the agent (those tests then skip).
browser=()
for pkg in chromium chromium-driver; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || browser+=("$pkg")
done
if [ ${#browser[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null; then SUDO="sudo"; else SUDO="false"; fi
  export DEBIAN_FRONTEND=noninteractive
  { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends "${browser[@]}"; } >&2 ||
    echo "bootstrap: could not install ${browser[*]}; the console browser tests will be skipped" >&2
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv >&2
fi
stamp=.venv/.robot-agent-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip >&2
  .venv/bin/python -m pip install -q -e ".[test,systemd]" >&2
  touch "$stamp"
fi
echo "$(pwd)/.venv/bin/python"
