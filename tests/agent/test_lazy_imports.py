"""A start loads only what the config uses: no OpenCV/NumPy without cameras, no Socket.IO without ARTEX.

Each case runs a real agent on the simulated tank in a fresh interpreter (``sys.modules``
of this test process already holds everything) and reports which libraries it loaded once
its adapters run: ARTEX connected to a real hub (agent.testing.artex_hub) in that process,
or, with ARTEX off, after start() returned.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import textwrap

import pytest

from agent.testing.ports import free_port
from agent.testing.running_agent import ROOT, sim_config

CHILD = textwrap.dedent('''
    import asyncio, json, sys
    from agent.testing.running_agent import running_agent, wait_for

    cfg, artex = json.loads(sys.argv[1]), sys.argv[2] == "1"

    async def main():
        hub = None
        if artex:
            from agent.testing.artex_hub import ArtexHub
            hub = ArtexHub(ready_delay_s=0.05)
            cfg["server"], cfg["port"] = "http://127.0.0.1", await hub.start()
        async with running_agent(cfg) as agent:
            ok = await wait_for(lambda: hub.connected, 20) if hub else True
            print(json.dumps({"connected": bool(ok), "adapters": sorted(agent.adapters),
                              "modules": sorted(m for m in sys.modules if "." not in m)}))
        if hub:
            await hub.stop()

    asyncio.run(main())
''')

#: a real agent in a fresh interpreter per test, ~3-10 s each
pytestmark = pytest.mark.slow


def loaded(cfg: dict, artex: bool) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(cfg), "1" if artex else "0"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_without_cameras_opencv_and_numpy_are_never_loaded():
    cfg = sim_config(robot_msg={"enabled": True, "state": {"address": f"tcp://127.0.0.1:{free_port()}"},
                                "command": {"address": f"tcp://127.0.0.1:{free_port()}"},
                                "action": {"address": f"tcp://127.0.0.1:{free_port()}"}},
                     console={"enabled": True, "port": free_port(), "token": secrets.token_urlsafe(32)})
    cfg["drivers"]["cameras"] = []
    got = loaded(cfg, artex=True)
    assert got["connected"] and {"artex", "robot_msg"} <= set(got["adapters"])
    assert "cv2" not in got["modules"] and "numpy" not in got["modules"]


def test_without_artex_socketio_is_never_loaded():
    cfg = sim_config()
    cfg["drivers"]["cameras"] = []
    got = loaded(cfg, artex=False)
    assert got["adapters"] == []
    assert not {"socketio", "engineio", "cv2", "numpy"} & set(got["modules"])


def test_a_camera_does_load_opencv():
    """The check sees a load when there is one: with a camera, OpenCV is there."""
    got = loaded(sim_config(), artex=False)
    assert "cv2" in got["modules"]
