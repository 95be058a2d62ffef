#!/usr/bin/env bash
# Install robot-agent as a systemd service on Raspberry Pi OS or Jetson (Ubuntu), as root.
#
#   sudo scripts/install.sh [--config PATH] [--no-start]
#
# - Debian packages: python3-venv, python3-dev, libsystemd-dev, pkg-config (systemd-python), i2c-tools
# - user robot-agent (system, no login) in groups dialout, i2c, video (and gpio when it exists)
# - this source tree copied to /opt/robot-agent/src, venv /opt/robot-agent/venv with robot-agent[systemd]
# - config /etc/robot-agent/params.json (kept if present; --config PATH installs that file)
# - udev rules /etc/udev/rules.d/99-robot-agent.rules, unit /etc/systemd/system/robot-agent.service
# - systemctl enable --now robot-agent (unless --no-start)
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
CONFIG=""
START=1
while [ $# -gt 0 ]; do
  case "$1" in
    --config) CONFIG=$2; shift 2 ;;
    --no-start) START=0; shift ;;
    *) echo "install.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "install.sh: run as root (sudo)" >&2; exit 1; }

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends python3-venv python3-dev libsystemd-dev pkg-config i2c-tools rsync

getent group i2c >/dev/null || groupadd --system i2c
id robot-agent >/dev/null 2>&1 || useradd --system --home-dir /var/lib/robot-agent --shell /usr/sbin/nologin robot-agent
groups=dialout,i2c,video
getent group gpio >/dev/null && groups=$groups,gpio
usermod -aG "$groups" robot-agent

install -d -m 0755 /opt/robot-agent
rsync -a --delete --exclude .git --exclude .venv --exclude logs "$SRC/" /opt/robot-agent/src/
[ -x /opt/robot-agent/venv/bin/python ] || python3 -m venv /opt/robot-agent/venv
/opt/robot-agent/venv/bin/python -m pip install -q --upgrade pip
/opt/robot-agent/venv/bin/python -m pip install -q "/opt/robot-agent/src[systemd]"

install -d -m 0750 -o robot-agent -g robot-agent /etc/robot-agent /var/lib/robot-agent /var/log/robot-agent
if [ -n "$CONFIG" ]; then
  install -m 0640 -o robot-agent -g robot-agent "$CONFIG" /etc/robot-agent/params.json
elif [ ! -f /etc/robot-agent/params.json ]; then
  install -m 0640 -o robot-agent -g robot-agent "$SRC/config/params.json" /etc/robot-agent/params.json
  echo "install.sh: installed the simulated-tank config; edit /etc/robot-agent/params.json (robot-agent probe helps)" >&2
fi
/opt/robot-agent/venv/bin/robot-agent check-config /etc/robot-agent/params.json

install -m 0644 "$SRC/systemd/99-robot-agent.rules" /etc/udev/rules.d/99-robot-agent.rules
udevadm control --reload-rules && udevadm trigger || true
install -m 0644 "$SRC/systemd/robot-agent.service" /etc/systemd/system/robot-agent.service
systemctl daemon-reload
if [ "$START" = 1 ]; then
  systemctl enable --now robot-agent
  systemctl --no-pager status robot-agent || true
else
  systemctl enable robot-agent
fi
