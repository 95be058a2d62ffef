"""drivers/ is a layer of its own: no drivers module loads anything from agent/."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import drivers
import drivers.emulators
from tests.conftest import ROOT

CHECK = ("import importlib, sys\n"
         "for name in sys.argv[1:]:\n"
         "    importlib.import_module(name)\n"
         "loaded = sorted(m for m in sys.modules if m == 'agent' or m.startswith('agent.'))\n"
         "assert not loaded, loaded\n")


def _modules() -> list[str]:
    names = [f"drivers.{m.name}" for m in pkgutil.iter_modules(drivers.__path__)]
    names += [f"drivers.emulators.{m.name}" for m in pkgutil.iter_modules(drivers.emulators.__path__)]
    return sorted(names)


def _run(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)


def test_every_drivers_module_imports_without_agent():
    names = _modules()
    assert "drivers.roboclaw" in names and "drivers.emulators.tank" in names
    done = _run(CHECK, *names)
    assert done.returncode == 0, done.stderr


def test_import_roboclaw_loads_no_agent_module():
    done = _run("import drivers.roboclaw, sys; assert not any(m.startswith('agent') for m in sys.modules)")
    assert done.returncode == 0, done.stderr


def test_import_roboclaw_stays_light():
    """A serial motor driver needs pyserial, not pydantic, robot_msg, numpy or OpenCV."""
    done = _run("import drivers.roboclaw, sys; print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))")
    assert done.returncode == 0, done.stderr
    loaded = set(done.stdout.split())
    assert "serial" in loaded
    assert not loaded & {"pydantic", "robot_msg", "numpy", "cv2"}, loaded
