#!/usr/bin/env bash
# Run the agent on the fully simulated tank, connected to the local ARTEX test hub, with the
# operator console in the browser (config/params.json "console": http://127.0.0.1:8080/).
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
# Ctrl-C, SIGTERM or SIGHUP to this script stop the agent (SIGTERM: it zeroes the motors first),
# then the hub; the agent runs in the background only so that this script can pass them on
AGENT=
stop_agent() {
  if [ -n "$AGENT" ]; then kill -TERM "$AGENT" 2>/dev/null || true; wait "$AGENT" || true; fi
  exit 130
}
trap stop_agent INT TERM HUP
echo "ARTEX test hub on http://localhost:8765 (pid $HUB, log logs/artex_hub.log)" >&2
"$PY" - <<'PY' >&2
from agent.config import load
c = load("config/params.json").console
host = f"[{c.host}]" if ":" in c.host else c.host
print(f"Console: open http://{host}:{c.port}/{'?token=<console.token>' if c.token else ''} in a browser "
      "(arrows/WASD or the pad drive, space or STOP stops)" if c.enabled else "Console: off (console.enabled false)")
PY
# health for `robot-agent status --status-file logs/status.json` (the service's default is under /run)
"$PY" -m agent run --config config/params.json --status-file logs/status.json "$@" &
AGENT=$!
wait "$AGENT"
