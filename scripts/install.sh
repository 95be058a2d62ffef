#!/usr/bin/env bash
# Install (or upgrade) robot-agent as a systemd service on Raspberry Pi OS Bookworm or another
# Debian/Ubuntu with Python >= 3.11. Run as root. See README.md "Deployment"; --help lists options.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: sudo scripts/install.sh [options]

Installs or upgrades robot-agent:
  - Debian packages: python3-venv, i2c-tools, python3-systemd (or, for a Python that does not see
    the distro's packages, what building systemd-python needs: gcc, libsystemd-dev, pkg-config,
    python3-dev), and python3-picamera2 where the distro has it (Raspberry Pi OS: the Pi camera)
  - where the distro's numpy is 1.x (Bookworm), python3-numpy, and pip keeps it in the venv:
    scripts/constraints-numpy1.txt (numpy<2, an OpenCV wheel built for numpy 1.x), so the distro's
    picamera2 imports beside the agent's OpenCV
  - gcc and python3-dev where PyPI has no gpiod wheel (32-bit ARM): pip builds the libgpiod v2
    bindings of the e-stop input from source (they vendor libgpiod; Debian's python3-libgpiod is v1)
  - a system user robot-agent in the groups dialout, i2c, video, gpio (groups created when missing)
  - this source tree copied to /opt/robot-agent/src; a venv /opt/robot-agent/venv created with
    --system-site-packages (so the distro's python3-picamera2 and python3-systemd are importable);
    /usr/local/bin/robot-agent links to its robot-agent command
  - the config /etc/robot-agent/params.json: an existing one is KEPT; --config FILE installs FILE
    only when there is none, or with --force-config (the old file is saved as params.json.bak-DATE)
  - udev rules /etc/udev/rules.d/99-robot-agent.rules, unit /etc/systemd/system/robot-agent.service
  - systemctl enable --now; an upgrade restarts a running service

Options:
  --config FILE     params.json to install (default: keep the existing one, else the simulated tank)
  --force-config    replace an existing params.json with --config FILE (a backup is kept)
  --python PY       Python (>= 3.11) for the venv (default: python3); e.g. /usr/bin/python3.11
  --no-start        enable the service but do not start or restart it
  --root DIR        install under DIR (tests, inspecting the layout): actions that need root
                    (apt-get, useradd/usermod, chown, udevadm, systemctl) are printed, not run
  --dry-run         print every action and change nothing
  --version         print the version of robot-agent this tree installs
  -h, --help        this text
EOF
}

SRC=$(cd "$(dirname "$0")/.." && pwd)
PROG=install.sh
# shellcheck source=scripts/install-common.sh
. "$SRC/scripts/install-common.sh"
CONFIG="" FORCE_CONFIG=0 START=1 PY=python3
while [ $# -gt 0 ]; do
  case "$1" in
    --config) CONFIG=${2:?--config needs a FILE}; shift 2 ;;
    --force-config) FORCE_CONFIG=1; shift ;;
    --python) PY=${2:?--python needs a path}; shift 2 ;;
    --no-start) START=0; shift ;;
    --version) sed -n 's/^version = "\(.*\)"/robot-agent \1/p' "$SRC/pyproject.toml"; exit 0 ;;
    *) common_option "$@"; shift "$SHIFT" ;;
  esac
done
options_done
[ -z "$CONFIG" ] || [ -f "$CONFIG" ] || { say "--config $CONFIG: no such file"; exit 2; }
[ -z "$CONFIG" ] || CONFIG=$(realpath "$CONFIG")

OPT=$ROOT/opt/robot-agent ETC=$ROOT/etc/robot-agent VENV=$ROOT/opt/robot-agent/venv
UNIT=$ROOT/etc/systemd/system/robot-agent.service RULES=$ROOT/etc/udev/rules.d/99-robot-agent.rules

# ----------------------------------------------------------------------------- Python
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || {
  say "$PY is not Python >= 3.11 ($("$PY" --version 2>&1 || echo missing)); pass --python PATH"
  say "(Jetson: JetPack 5/6 ship Python 3.8/3.10; see README.md Deployment for a newer Python)"
  exit 1
}
# python3-systemd (journald, sd_notify) from apt serves a Python that sees the distro's
# dist-packages; any other Python (a second one on JetPack) builds systemd-python in the venv.
# Decided before apt runs, so --dry-run prints what the real run does.
SYSTEMD_EXTRA="" DISTRO_PY=0
if "$PY" -c 'import sys; sys.exit("/usr/lib/python3/dist-packages" not in sys.path)' 2>/dev/null; then DISTRO_PY=1; fi
if [ "$DISTRO_PY" = 0 ] && ! "$PY" -c 'import systemd.daemon, systemd.journal' 2>/dev/null; then
  SYSTEMD_EXTRA="[systemd]"
fi

# ----------------------------------------------------------------------------- packages
packages=(python3-venv i2c-tools python3-systemd)
if [ -n "$SYSTEMD_EXTRA" ]; then   # this Python cannot see the distro's python3-systemd: build systemd-python
  packages+=(gcc libsystemd-dev pkg-config python3-dev)
fi
case "$(dpkg --print-architecture 2>/dev/null || echo unknown)" in
  amd64|arm64) ;;                  # gpiod (libgpiod v2 bindings) has manylinux wheels here
  *) packages+=(gcc python3-dev) ;;   # no wheel: pip builds gpiod from its sdist (vendored libgpiod)
esac
if apt-cache show python3-picamera2 >/dev/null 2>&1; then packages+=(python3-picamera2); fi
# The distro's numpy ABI: on Bookworm (numpy 1.24) its picamera2/simplejpeg need numpy 1.x, so a
# venv on the distro's Python keeps the distro's numpy and takes an OpenCV wheel built for it
# (scripts/constraints-numpy1.txt). A second Python (JetPack) sees neither, so nothing to keep.
CONSTRAINTS=()
distro_numpy=$(apt-cache policy python3-numpy 2>/dev/null | sed -n 's/^ *Candidate: *\([0-9]*:\)\{0,1\}\([0-9]*\)\..*/\2/p')
if [ "$DISTRO_PY" = 1 ] && [ "$distro_numpy" = 1 ]; then
  say "the distro's numpy is 1.x (Bookworm): keeping it in the venv, with an OpenCV built for it"
  say "(scripts/constraints-numpy1.txt: numpy<2, opencv-python-headless<4.12; python3-picamera2 needs numpy 1.x)"
  CONSTRAINTS=(-c "$OPT/src/scripts/constraints-numpy1.txt")
  packages+=(python3-numpy)
fi
if [ -e /etc/nv_tegra_release ]; then
  say "Jetson: the OpenCV this installs (PyPI, no GStreamer) cannot open a gst:nvarguscamerasrc camera;"
  say "docs/hardware.md 'CSI cameras on a Jetson' says how to put a GStreamer-enabled OpenCV in the venv"
fi
sys env DEBIAN_FRONTEND=noninteractive apt-get update -qq
sys env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}"
if [ -z "$ROOT" ] && [ "$DRY" = 0 ] && [ -z "$SYSTEMD_EXTRA" ] \
   && ! "$PY" -c 'import systemd.daemon, systemd.journal' 2>/dev/null; then
  say "python3-systemd is installed but $PY cannot import it: building systemd-python in the venv"
  SYSTEMD_EXTRA="[systemd]"
  sys env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gcc libsystemd-dev pkg-config python3-dev
fi

# ----------------------------------------------------------------------------- user
if [ -n "$ROOT" ] || ! getent group i2c >/dev/null; then sys groupadd --system i2c; fi
if [ -n "$ROOT" ] || ! getent group gpio >/dev/null; then sys groupadd --system gpio; fi   # e-stop input
if [ -n "$ROOT" ] || ! id robot-agent >/dev/null 2>&1; then
  sys useradd --system --home-dir /var/lib/robot-agent --shell /usr/sbin/nologin robot-agent
fi
groups=dialout,i2c,video,gpio
sys usermod -aG "$groups" robot-agent

# ----------------------------------------------------------------------------- code and venv
copy_tree() {   # copy the source tree to $OPT/src, replacing an older copy (upgrade)
  rm -rf "$OPT/src.new" && mkdir -p "$OPT/src.new"
  tar -C "$SRC" --exclude=./.git --exclude=./.venv --exclude=./logs --exclude=./.hypothesis \
    --exclude=./.pytest_cache --exclude='__pycache__' -cf - . \
    | tar -C "$OPT/src.new" -xf -
  rm -rf "$OPT/src" && mv "$OPT/src.new" "$OPT/src"
}
run install -d -m 0755 "$OPT"
echo "+ copy_tree $SRC -> $OPT/src"; [ "$DRY" = 1 ] || copy_tree
if [ ! -x "$VENV/bin/python" ]; then
  say "creating the venv with --system-site-packages: the distro's python3-picamera2 (Pi camera)"
  say "and python3-systemd are importable from it; packages installed in the venv take precedence"
  run "$PY" -m venv --system-site-packages "$VENV"
fi
run "$VENV/bin/python" -m pip install -q --disable-pip-version-check ${CONSTRAINTS[@]+"${CONSTRAINTS[@]}"} --upgrade "$OPT/src$SYSTEMD_EXTRA"
# The agent's bytecode, compiled here (pip does too, unless told not to): the service cannot write it
# (ProtectSystem=strict keeps /opt read-only), and a module without it is compiled from source at every start.
run "$VENV/bin/python" -I -c 'import compileall as c, importlib.util as u, sys; sys.exit(not all([c.compile_dir(u.find_spec(p).submodule_search_locations[0], quiet=1) for p in ("agent", "drivers")]))'
run install -d -m 0755 "$ROOT/usr/local/bin"
run ln -sfn /opt/robot-agent/venv/bin/robot-agent "$ROOT/usr/local/bin/robot-agent"   # robot-agent on PATH

# ----------------------------------------------------------------------------- config
install_config() {   # install_config FILE: checked, then to $ETC/params.json, backing up a different existing one
  # a config that does not load never replaces a working one (exit 2 with its problems)
  run "$VENV/bin/robot-agent" check-config "$1"
  if [ -f "$ETC/params.json" ]; then
    if cmp -s "$1" "$ETC/params.json"; then say "$ETC/params.json is already $1"; return; fi
    run cp -p "$ETC/params.json" "$ETC/params.json.bak-$(date +%Y%m%d-%H%M%S)"
  fi
  run install -m 0640 "$1" "$ETC/params.json"
  sys chown robot-agent:robot-agent "$ETC/params.json"
}
for d in "$ETC" "$ROOT/var/lib/robot-agent" "$ROOT/var/log/robot-agent"; do
  run install -d -m 0750 "$d"
  sys chown robot-agent:robot-agent "$d"
done
if [ -f "$ETC/params.json" ] && [ "$FORCE_CONFIG" = 0 ]; then
  say "keeping the existing $ETC/params.json${CONFIG:+ (not replaced by $CONFIG: add --force-config)}"
elif [ -n "$CONFIG" ]; then
  install_config "$CONFIG"
elif [ ! -f "$ETC/params.json" ]; then
  install_config "$SRC/config/params.json"
  say "installed the simulated-tank config; edit $ETC/params.json (robot-agent probe helps)"
fi
run "$VENV/bin/robot-agent" check-config "$ETC/params.json"

# ----------------------------------------------------------------------------- udev and systemd
run install -D -m 0644 "$SRC/systemd/99-robot-agent.rules" "$RULES"
sys udevadm control --reload-rules
sys udevadm trigger
run install -D -m 0644 "$SRC/systemd/robot-agent.service" "$UNIT"
sys systemctl daemon-reload
if [ "$START" = 0 ]; then
  sys systemctl enable robot-agent
elif [ -z "$ROOT" ] && systemctl is-active --quiet robot-agent 2>/dev/null; then
  sys systemctl enable robot-agent
  sys systemctl restart robot-agent   # upgrade: run the new code
  say "robot-agent restarted"
else
  sys systemctl enable --now robot-agent
fi
say "done: robot-agent status | journalctl -u robot-agent -f"
