"""A start loads only what the config uses: no OpenCV/NumPy without cameras, no Socket.IO without ARTEX.

Each case runs a real agent on the simulated tank in a fresh interpreter (``sys.modules``
of this test process already holds everything) and reports which libraries it loaded once
its adapters run: ARTEX connected to a real hub (agent.testing.artex_hub) in that process,
or, with ARTEX off, after start() returned. The ``robot-agent run`` cases run the command's own
start path (agent.__main__.main: config, logging, agent.ops.service) against a hub in this
process and report ``sys.modules`` at two moments: when the ARTEX adapter logs its connect, and
when the agent logs that it is up (after its optional work).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import signal
import subprocess
import sys
import textwrap

import pytest

from agent.testing.artex_hub import ArtexHub
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


#: ``robot-agent run`` in a child: sys.modules at the ARTEX connect and at "agent ... up", then SIGTERM
RUN_CHILD = textwrap.dedent('''
    import faulthandler, json, logging, os, signal, sys
    import agent.app

    faulthandler.register(signal.SIGUSR1, all_threads=True)   # the test's timeout asks where each thread is
    from agent.__main__ import main

    agent.app.FIRST_CONNECT_S = float(sys.argv[3])   # the bound on the wait for ARTEX before optional work
    seen = {}

    class Moments(logging.Handler):
        def emit(self, record):
            text = record.getMessage()
            moment = ("connected" if text.startswith("ARTEX: connected to") else
                      "up" if record.name == "agent.app" and text.startswith("agent ") and " up: " in text else None)
            if moment and moment not in seen:
                seen[moment] = sorted(sys.modules)
                if len(seen) == 2:
                    print(json.dumps(seen), flush=True)
                    os.kill(os.getpid(), signal.SIGTERM)

    logging.getLogger().addHandler(Moments(logging.INFO))
    sys.exit(main(["run", "--config", sys.argv[1], "--status-file", sys.argv[2], "--log-level", "info"]))
''')

#: what an ARTEX-only robot must not load: OpenCV/NumPy (cameras), the other protocols' libraries
#: (Sim2Bot's websockets, robot_msg's pyzmq), the console's aiohttp server and password check, the
#: flight recorder's MCAP writer (recorder off), the libraries of python-socketio's sync client (requests'
#: urllib3, websocket-client's modules: agent.app.SYNC_CLIENT_ONLY) and the modules of all these in the agent
NOT_FOR_ARTEX_ONLY = ("cv2", "numpy", "zmq", "robot_msg", "sim2bot", "websockets", "aiohttp.web", "zxcvbn",
                      "prometheus_client", "mcap", "agent.video.hub", "agent.video.capture", "agent.console",
                      "agent.adapters.sim2bot", "agent.adapters.robotmsg", "agent.recorder.writer",
                      "agent.recorder.web", "urllib3", "requests.sessions", "websocket._core")


async def run_moments(cfg: dict, tmp_path, first_connect_s: float = 0.5) -> dict[str, set[str]]:
    """``robot-agent run`` on ``cfg`` with ARTEX to a hub here: {"connected", "up"} -> modules loaded then."""
    hub = ArtexHub(ready_delay_s=0.05)
    cfg = {**cfg, "server": "http://127.0.0.1", "port": await hub.start()}
    path = tmp_path / "params.json"
    path.write_text(json.dumps(cfg))
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", RUN_CHILD, str(path), str(tmp_path / "status.json"), str(first_connect_s),
            cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = bytearray(), bytearray()

        async def pump(stream, into: bytearray) -> None:
            while chunk := await stream.read(65536):
                into += chunk
        pumps = asyncio.gather(pump(proc.stdout, out), pump(proc.stderr, err))
        try:
            await asyncio.wait_for(asyncio.shield(pumps), 60)
            await proc.wait()
        except TimeoutError:      # say where the child was: its threads' stacks and its log's tail
            proc.send_signal(signal.SIGUSR1)
            await asyncio.sleep(1.0)  # real time held on purpose: the child writes its stacks (failure path only)
            raise AssertionError(f"robot-agent run did not finish in 60 s; its log ends:\n{err.decode()[-12000:]}")
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            await asyncio.wait_for(pumps, 10)
    finally:
        await hub.stop()
    assert proc.returncode == 0, err.decode()[-2000:]
    assert hub.passports, "the agent never connected"
    got = json.loads(out.decode().strip().splitlines()[-1])
    return {moment: set(mods) for moment, mods in got.items()}


def loaded_any(modules: set[str], names: tuple[str, ...]) -> list[str]:
    """The ``names`` (packages: any of their modules) among ``modules``."""
    return sorted(n for n in names if any(m == n or m.startswith(n + ".") for m in modules))


async def test_robot_agent_run_artex_only_loads_no_camera_no_other_protocol_no_console_no_mcap(tmp_path):
    cfg = sim_config()
    cfg["drivers"]["cameras"] = []
    moments = await run_moments(cfg, tmp_path)
    for moment, modules in moments.items():
        assert "socketio" in modules and "agent.adapters.artex" in modules, moment
        assert loaded_any(modules, NOT_FOR_ARTEX_ONLY) == [], moment


async def test_robot_agent_run_connects_artex_before_the_camera_and_the_console_load(tmp_path):
    """The shipped set (a camera, the console, the recorder, ARTEX): at the hub connect neither OpenCV nor
    the console's server is loaded yet; once the agent is up both are. The bound on the wait for ARTEX
    is raised here so a loaded machine cannot reorder the two."""
    cfg = sim_config(console={"enabled": True, "port": free_port(), "token": secrets.token_urlsafe(32)},
                     recorder={"enabled": True, "dir": str(tmp_path / "recordings")})
    moments = await run_moments(cfg, tmp_path, first_connect_s=30.0)
    assert loaded_any(moments["connected"], ("cv2", "numpy", "agent.video.hub", "agent.console", "aiohttp.web",
                                             "mcap")) == []
    assert loaded_any(moments["up"], ("cv2", "agent.video.hub", "agent.console", "aiohttp.web", "mcap")) == \
        ["agent.console", "agent.video.hub", "aiohttp.web", "cv2", "mcap"]
