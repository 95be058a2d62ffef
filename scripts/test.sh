#!/usr/bin/env bash
# Run the whole test suite on a fresh machine: sets up .venv (scripts/bootstrap.sh), then pytest
# on parallel workers (pytest-xdist; most tests wait on sockets and timers, not on the CPU) and
# the slowest 15 tests listed at the end.
# Extra arguments go to pytest, e.g. scripts/test.sh tests/drivers -q
# ROBOT_AGENT_TEST_WORKERS sets the worker count (default 7; 0 runs in this process);
# an -n/--numprocesses (or -p no:xdist) among the arguments wins.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=$(scripts/bootstrap.sh)
# Bytecode (and pytest's rewritten test modules) is cached in __pycache__ (git-ignored; install.sh
# copies the tree without it), even where PYTHONDONTWRITEBYTECODE is set: otherwise every worker and
# every `python -m agent` a test starts compiles the agent and the tests again (~6 s of CPU per
# worker, on every run).
unset PYTHONDONTWRITEBYTECODE
# compiled once here (both cores) rather than by every worker at once on a fresh clone
"$PY" -m compileall -q -j 0 agent drivers >/dev/null
workers=(-n "${ROBOT_AGENT_TEST_WORKERS:-7}")
for arg in "$@"; do
  case "$arg" in -n|-n[0-9]*|--numprocesses*|*no:xdist) workers=() ;; esac
done
exec "$PY" -m pytest "${workers[@]}" --durations=15 "$@"
