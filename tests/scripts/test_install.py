"""scripts/install.sh and scripts/uninstall.sh under a root prefix: what they print and what they lay out.

``--root DIR`` installs the unit, udev rules, source copy, venv and config under DIR and prints
(without running) what needs root: apt-get, useradd/usermod, chown, udevadm, systemctl. The venv
is real (``python -m venv --system-site-packages`` and ``pip install`` of this tree); the agent's
dependencies come from the test interpreter through PYTHONPATH, standing in for the distro
packages a real install sees through ``--system-site-packages``, so no dependency is downloaded
(one install takes ~10-15 s).
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from tests.conftest import ROOT

# slow: real venvs and pip installs (~10-20 s); one xdist worker runs this module (tests/conftest.py
# ONE_WORKER) so the module's install is built once
pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

INSTALL = ROOT / "scripts" / "install.sh"
UNINSTALL = ROOT / "scripts" / "uninstall.sh"
EXAMPLE = ROOT / "config" / "examples" / "roboclaw-mpu6050-ina219-pca9685.json"
ROOT_ONLY = ("apt-get install", "useradd", "usermod", "chown robot-agent", "udevadm control",
             "systemctl daemon-reload", "systemctl enable")


def script(path: Path, *args: str, **env_extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=sysconfig.get_paths()["purelib"],
               PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}", **env_extra)
    return subprocess.run(["bash", str(path), *args], capture_output=True, text=True, timeout=200, env=env,
                          cwd=ROOT)


def actions(res: subprocess.CompletedProcess) -> list[str]:
    return [l[2:] for l in res.stdout.splitlines() if l.startswith("+ ")]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """One real install under a fresh root: (root, result). pip is told not to compile bytecode
    (PIP_COMPILE=0, as a pip.conf may): the installer's own compile step must
    (test_the_installed_agent_starts_from_bytecode)."""
    root = tmp_path_factory.mktemp("install") / "root"
    res = script(INSTALL, "--root", str(root), "--python", sys.executable, PIP_COMPILE="0")
    assert res.returncode == 0, res.stdout + res.stderr
    return root, res


def test_help_names_every_option():
    for path in (INSTALL, UNINSTALL):
        res = script(path, "--help")
        assert res.returncode == 0 and "--dry-run" in res.stdout and "--root DIR" in res.stdout
    assert all(o in script(INSTALL, "--help").stdout for o in ("--config FILE", "--force-config", "--python PY"))
    assert "--purge" in script(UNINSTALL, "--help").stdout
    bad = script(INSTALL, "--frobnicate")
    assert bad.returncode == 2 and "unknown option --frobnicate" in bad.stderr


def test_a_python_older_than_3_11_or_missing_is_refused_with_the_jetson_hint(tmp_path):
    for python in ("/nonexistent/python3", "false"):
        res = script(INSTALL, "--dry-run", "--root", str(tmp_path / "r"), "--python", python)
        assert res.returncode == 1 and "not Python >= 3.11" in res.stderr and "Jetson" in res.stderr, res.stderr
        assert actions(res) == []


def test_dry_run_prints_every_action_and_changes_nothing(tmp_path):
    root = tmp_path / "root"
    res = script(INSTALL, "--dry-run", "--root", str(root))
    assert res.returncode == 0, res.stderr
    assert not root.exists()
    done = actions(res)
    for needle in (*ROOT_ONLY, "-m venv --system-site-packages", "pip install", f"{root}/usr/local/bin/robot-agent",
                   f"{root}/etc/systemd/system/robot-agent.service", f"{root}/etc/udev/rules.d/99-robot-agent.rules",
                   f"{root}/etc/robot-agent/params.json", "check-config"):
        assert any(needle in a for a in done), (needle, done)
    assert all("skipped: --root" in a for a in done if a.startswith(ROOT_ONLY))
    assert "--system-site-packages" in res.stderr and "picamera2" in res.stderr   # it says why
    assert "--version" in script(INSTALL, "--help").stdout


def test_root_install_lays_out_unit_rules_venv_and_config(installed):
    root, res = installed
    assert (root / "etc/systemd/system/robot-agent.service").read_text() == \
        (ROOT / "systemd/robot-agent.service").read_text()
    assert (root / "etc/udev/rules.d/99-robot-agent.rules").read_text() == \
        (ROOT / "systemd/99-robot-agent.rules").read_text()
    assert (root / "etc/robot-agent/params.json").read_text() == (ROOT / "config/params.json").read_text()
    assert oct((root / "etc/robot-agent/params.json").stat().st_mode & 0o777) == oct(0o640)
    venv = root / "opt/robot-agent/venv"
    assert "include-system-site-packages = true" in (venv / "pyvenv.cfg").read_text()
    assert (root / "opt/robot-agent/src/agent/ops/status.py").is_file()
    assert os.readlink(root / "usr/local/bin/robot-agent") == "/opt/robot-agent/venv/bin/robot-agent"
    assert not (root / "opt/robot-agent/src/.git").exists()
    # the installed entry point runs the installed package (not this checkout)
    probe = subprocess.run([str(venv / "bin/python"), "-c", "import agent; print(agent.__file__)"],
                           capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=""), cwd="/")
    assert str(venv) in probe.stdout, probe.stdout + probe.stderr
    assert f"{root}/etc/robot-agent/params.json: ok" in res.stdout      # check-config ran, with the venv's agent
    assert all("skipped: --root" in a for a in actions(res) if a.startswith(ROOT_ONLY))


def test_the_installed_agent_starts_from_bytecode(installed):
    """The service cannot write bytecode (ProtectSystem=strict): every module of the installed agent and
    drivers has its compiled file, current for its source, so no start compiles anything."""
    root, _ = installed
    venv = root / "opt/robot-agent/venv"
    check = textwrap.dedent('''
        import importlib.util, pathlib, sys
        missing = []
        for pkg in ("agent", "drivers"):
            for src in pathlib.Path(importlib.util.find_spec(pkg).submodule_search_locations[0]).rglob("*.py"):
                pyc = pathlib.Path(importlib.util.cache_from_source(str(src)))
                if not pyc.is_file() or pyc.read_bytes()[8:12] != int(src.stat().st_mtime).to_bytes(4, "little"):
                    missing.append(str(src))
        print(len(missing), missing[:5])
    ''')
    done = subprocess.run([str(venv / "bin/python"), "-I", "-c", check], capture_output=True, text=True, cwd="/")
    assert done.returncode == 0 and done.stdout.startswith("0 "), done.stdout + done.stderr


def test_upgrade_keeps_the_config_unless_forced_and_then_backs_it_up(installed):
    root, _ = installed
    params = root / "etc/robot-agent/params.json"
    before = params.read_text()
    kept = script(INSTALL, "--dry-run", "--root", str(root), "--config", str(EXAMPLE))
    assert kept.returncode == 0 and "keeping the existing" in kept.stderr and "--force-config" in kept.stderr
    assert not any(a.startswith("install -m 0640") for a in actions(kept))
    assert "-m venv" not in kept.stdout                                  # the venv is reused on upgrade
    forced = script(INSTALL, "--root", str(root), "--config", str(EXAMPLE), "--force-config")
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert params.read_text() == EXAMPLE.read_text()
    backups = list(params.parent.glob("params.json.bak-*"))
    assert len(backups) == 1 and backups[0].read_text() == before
    bad = params.parent.parent.parent / "bad.json"
    bad.write_text('{"base": {"track_width_m": -1}}')
    refused = script(INSTALL, "--root", str(root), "--config", str(bad), "--force-config")
    assert refused.returncode != 0 and "track_width_m" in refused.stdout + refused.stderr
    assert params.read_text() == EXAMPLE.read_text()                    # a bad config never replaces a good one
    assert len(list(params.parent.glob("params.json.bak-*"))) == 1


def test_uninstall_keeps_the_config_unless_purged(tmp_path, installed):
    root, _ = installed
    dry = script(UNINSTALL, "--dry-run", "--root", str(root))
    assert dry.returncode == 0 and (root / "opt/robot-agent").exists()
    assert any(a.startswith("systemctl disable --now robot-agent") and "skipped" in a for a in actions(dry))
    res = script(UNINSTALL, "--root", str(root))
    assert res.returncode == 0, res.stderr
    assert not (root / "opt/robot-agent").exists()
    assert not (root / "etc/systemd/system/robot-agent.service").exists()
    assert not (root / "etc/udev/rules.d/99-robot-agent.rules").exists()
    assert not (root / "usr/local/bin/robot-agent").is_symlink()
    assert (root / "etc/robot-agent/params.json").exists() and "--purge" in res.stderr
    purged = script(UNINSTALL, "--root", str(root), "--purge")
    assert purged.returncode == 0 and not (root / "etc/robot-agent").exists()
    assert any(a.startswith("userdel robot-agent") for a in actions(purged))


def test_version_of_the_installer_and_the_command_agree():
    res = script(INSTALL, "--version")
    assert res.returncode == 0 and res.stdout.startswith("robot-agent "), res.stdout + res.stderr
    cli = subprocess.run([sys.executable, "-m", "agent", "--version"], capture_output=True, text=True, cwd=ROOT)
    assert cli.returncode == 0 and cli.stdout.strip() == res.stdout.strip(), cli.stdout + cli.stderr


def test_the_systemd_bindings_are_planned_before_apt_so_dry_run_shows_the_real_plan(tmp_path, installed):
    # a Python that sees the distro's dist-packages gets python3-systemd from apt: no compiler, no build
    if not Path("/usr/bin/python3").exists():
        pytest.skip("no distro Python")
    distro = script(INSTALL, "--dry-run", "--root", str(tmp_path / "r"), "--python", "/usr/bin/python3")
    assert distro.returncode == 0, distro.stderr
    apt = next(a for a in actions(distro) if "apt-get install" in a)
    assert "python3-systemd" in apt and "gcc" not in apt and "libsystemd-dev" not in apt
    assert not any("[systemd]" in a for a in actions(distro) if "pip install" in a)
    # the real --root install printed the same pip line as its dry run (same Python, same plan)
    root, res = installed
    dry = script(INSTALL, "--dry-run", "--root", str(tmp_path / "r2"), "--python", sys.executable)
    pip_real = next(a for a in actions(res) if "pip install" in a).replace(str(root), "ROOT")
    pip_dry = next(a for a in actions(dry) if "pip install" in a).replace(str(tmp_path / "r2"), "ROOT")
    assert pip_real == pip_dry
    assert "does not provide the extra" not in res.stderr and "asyncio_client" not in res.stderr
