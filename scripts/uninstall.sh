#!/usr/bin/env bash
# Remove robot-agent as installed by scripts/install.sh. Run as root. --help lists options.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: sudo scripts/uninstall.sh [options]

Stops and disables the service, removes the unit, the udev rules, /opt/robot-agent (code and
venv) and the /usr/local/bin/robot-agent link. Keeps /etc/robot-agent (the config),
/var/lib/robot-agent, /var/log/robot-agent and the robot-agent user unless --purge.

Options:
  --purge      also remove /etc/robot-agent, /var/lib/robot-agent, /var/log/robot-agent and the user
  --root DIR   remove what install.sh --root DIR laid out under DIR; actions that need root
               (systemctl, udevadm, userdel) are printed, not run
  --dry-run    print every action and change nothing
  -h, --help   this text
EOF
}

PROG=uninstall.sh
# shellcheck source=scripts/install-common.sh
. "$(dirname "$0")/install-common.sh"
PURGE=0
while [ $# -gt 0 ]; do
  case "$1" in
    --purge) PURGE=1; shift ;;
    *) common_option "$@"; shift "$SHIFT" ;;
  esac
done
options_done

if [ -n "$ROOT" ] || systemctl cat robot-agent >/dev/null 2>&1; then
  sys systemctl disable --now robot-agent
fi
run rm -f "$ROOT/etc/systemd/system/robot-agent.service" "$ROOT/etc/udev/rules.d/99-robot-agent.rules"
sys systemctl daemon-reload
sys udevadm control --reload-rules
run rm -rf "$ROOT/opt/robot-agent"
if [ -L "$ROOT/usr/local/bin/robot-agent" ] || [ "$DRY" = 1 ]; then run rm -f "$ROOT/usr/local/bin/robot-agent"; fi
if [ "$PURGE" = 1 ]; then
  run rm -rf "$ROOT/etc/robot-agent" "$ROOT/var/lib/robot-agent" "$ROOT/var/log/robot-agent"
  if [ -n "$ROOT" ] || id robot-agent >/dev/null 2>&1; then sys userdel robot-agent; fi
else
  say "kept $ROOT/etc/robot-agent (config), $ROOT/var/lib/robot-agent, $ROOT/var/log/robot-agent and the"
  say "robot-agent user; --purge removes them"
fi
say "done"
