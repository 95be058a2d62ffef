"""The Pi camera layout on Bookworm: scripts/install.sh builds the venv on the distribution's Python
and keeps the distribution's numpy 1.x, so a module the distribution compiled against numpy 1.x
(on a Pi: picamera2's simplejpeg; here python3-opencv's cv2, Debian 12's stand-in) imports and
works next to the agent's camera path (drivers.camera with the venv's OpenCV).

Needs Debian 12's /usr/bin/python3 with python3-numpy (1.24) and python3-opencv (built against
numpy 1.x); skipped elsewhere. The venv is real (``install.sh --root``); the agent's dependencies
other than numpy and OpenCV come from the test interpreter through PYTHONPATH (as in
test_install.py), numpy from the distribution and OpenCV from pip under
scripts/constraints-numpy1.txt (the wheel comes from pip's cache or index). ~20-40 s: slow.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

DISTRO_PY = "/usr/bin/python3"
DIST_PACKAGES = "/usr/lib/python3/dist-packages"
#: what the distribution provides on a Pi: the test interpreter's copies stay out of PYTHONPATH
DISTRO_OWNED = ("numpy", "cv2", "opencv")

PROBE = r'''
import json, sys
if sys.argv[1] == "distro":          # the distribution's OpenCV, compiled against numpy 1.x, imported first
    sys.path.insert(0, "/usr/lib/python3/dist-packages")
import numpy
import cv2
ok, jpeg = cv2.imencode(".jpg", numpy.zeros((48, 64, 3), numpy.uint8))
# the agent's camera path: a camera opened and read, the frame encoded, the picam module imported
from drivers import picamera
from drivers.camera import Camera
from drivers.config import CameraConfig
cam = Camera(CameraConfig(id="front", source="sim://pattern", width=64, height=48))
cam.open()
frame, _ = cam.read()
cam.close()
ok2, jpeg2 = cv2.imencode(".jpg", frame)
print(json.dumps({"numpy": numpy.__version__, "numpy_file": numpy.__file__, "cv2": cv2.__version__,
                  "cv2_file": cv2.__file__, "jpeg": bool(ok) and len(jpeg) > 0, "frame": list(frame.shape),
                  "agent_jpeg": bool(ok2) and len(jpeg2) > 0, "picamera": picamera.__name__}))
'''


def _distro_stack() -> str | None:
    """Why this machine cannot stand in for Bookworm's stack, or None when it can."""
    if not Path(DISTRO_PY).exists():
        return f"no {DISTRO_PY}"
    res = subprocess.run([DISTRO_PY, "-c", "import numpy, cv2, sys; "
                          "sys.exit(0 if numpy.__version__.startswith('1.') else 3)"], capture_output=True, text=True)
    return None if res.returncode == 0 else f"{DISTRO_PY} lacks python3-numpy 1.x / python3-opencv: {res.stderr[-200:]}"


def _deps_without_the_distros(tmp: Path) -> Path:
    """A PYTHONPATH directory with the test interpreter's packages except numpy and OpenCV."""
    out = tmp / "deps"
    out.mkdir()
    purelib = Path(sysconfig.get_paths()["purelib"])
    for entry in purelib.iterdir():
        name = entry.name.lower()
        if name.startswith(DISTRO_OWNED) or name.startswith(("_distutils_hack", "distutils-precedence")):
            continue
        if name.startswith(("agent", "drivers", "robot_agent", "__editable__", "__pycache__")):
            continue                                    # the agent itself comes from the install
        (out / entry.name).symlink_to(entry)
    return out


def test_the_pi_venv_keeps_the_distros_numpy_1_beside_the_agents_camera_path(tmp_path):
    why = _distro_stack()
    if why:
        pytest.skip(why)
    deps = _deps_without_the_distros(tmp_path)
    root = tmp_path / "root"
    env = dict(os.environ, PYTHONPATH=str(deps), PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    res = subprocess.run(["bash", str(ROOT / "scripts/install.sh"), "--root", str(root), "--python", DISTRO_PY,
                          "--no-start"], capture_output=True, text=True, timeout=360, env=env, cwd=ROOT)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    pip = next(l for l in res.stdout.splitlines() if " -m pip install " in l)
    assert "constraints-numpy1.txt" in pip and "[systemd]" not in pip        # distro numpy kept, no compiler
    assert "gcc" not in res.stdout and "python3-numpy" in res.stdout
    assert "asyncio_client" not in res.stderr and "does not provide the extra" not in res.stderr
    venv_py = root / "opt/robot-agent/venv/bin/python"
    got = {}
    for which in ("distro", "venv"):
        probe = subprocess.run([str(venv_py), "-c", PROBE, which], capture_output=True, text=True, timeout=60,
                               env=env, cwd="/")
        assert probe.returncode == 0, probe.stdout + probe.stderr             # no "numpy.dtype size changed"
        got[which] = json.loads(probe.stdout.strip().splitlines()[-1])
        assert got[which]["numpy"].startswith("1.") and got[which]["numpy_file"].startswith(DIST_PACKAGES), got
        assert got[which]["jpeg"] and got[which]["agent_jpeg"] and got[which]["frame"] == [48, 64, 3], got
    assert got["distro"]["cv2_file"].startswith(DIST_PACKAGES), got          # the numpy-1.x-built module worked
    assert str(root) in got["venv"]["cv2_file"] and got["venv"]["cv2"].startswith("4."), got   # pip's OpenCV 4.11
    installed = glob.glob(str(root / "opt/robot-agent/venv/lib/python3*/site-packages/numpy*"))
    assert installed == [], installed                                         # pip put no numpy 2 in front
