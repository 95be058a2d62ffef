#!/usr/bin/env bash
# Run the whole test suite on a fresh machine: sets up .venv (scripts/bootstrap.sh), then pytest.
# Extra arguments go to pytest, e.g. scripts/test.sh tests/drivers -q
set -euo pipefail
cd "$(dirname "$0")/.."
PY=$(scripts/bootstrap.sh)
exec "$PY" -m pytest "$@"
