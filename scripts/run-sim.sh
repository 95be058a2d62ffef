#!/usr/bin/env bash
# Run the agent on the fully simulated tank, connected to the local ARTEX test hub.
# Starts scripts/artex_hub.py on port 8765 in the background (its output: logs/artex_hub.log;
# type hub commands with: scripts/artex_hub.py in a terminal instead), then the agent in the
# foreground with config/params.json. Ctrl-C stops both; the motors are stopped first.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=$(scripts/bootstrap.sh)
mkdir -p logs
"$PY" scripts/artex_hub.py --port 8765 --demo >logs/artex_hub.log 2>&1 &
HUB=$!
trap 'kill $HUB 2>/dev/null || true' EXIT
echo "ARTEX test hub on http://localhost:8765 (pid $HUB, log logs/artex_hub.log)" >&2
"$PY" -m agent run --config config/params.json "$@"
