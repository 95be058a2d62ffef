"""The emergency stop against every source at once, on real peers (issue 18 item 3, docs/safety.md).

One agent on the simulated tank serves the four sources together: the ARTEX hub
(agent.testing.artex_hub.ArtexHub running the demo pattern of scripts/artex_hub.py --demo), a
Sim2Bot controller (the real ``sim2bot bridge`` and ``sim2bot.Robot``), a robot_msg peer (ZeroMQ, the
real codecs) and a console tab (WebSocket). Each streams motion. The console's e-stop is set as the
console's STOP does it (``ControlLoop.estop("console", ...)``); while it holds every duty the RoboClaw
emulator hands to the tank physics is recorded, each peer reads the e-stop from its own side (hub
telem, Sim2Bot telemetry, RobotState aux, the console's state message, the status file and STATUS=),
every source is refused (the console, which set it, included), the hub restarts (the link
reconnects) and the e-stop still holds. After the release nothing moves while the sources stream on;
a fresh command (the console's explicit zero and drive of a new key-down) moves the tank again.

``test_estop_soak`` is the acceptance run: ``ROBOT_AGENT_ESTOP_SOAK_S`` seconds (default 60) of all
four streams with the e-stop set, zero nonzero duty at the motor emulator.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import threading
import time
from pathlib import Path

import aiohttp
import pytest
import robot_msg as rm

from agent.ops.status import StatusReporter
from agent.testing.artex_hub import ArtexHub, artex_params
from agent.testing.ports import free_port
from agent.testing.running_agent import ROOT, deep_merge, running_agent, wait_for
from agent.testing.sim2bot_bridge import Bridge, controller
from tests.adapters.test_robotmsg import Controller, rm_config, u_rt

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.filterwarnings("ignore:connect\\(\\) must be used as a context manager")]

#: seconds of the acceptance run (env ROBOT_AGENT_ESTOP_SOAK_S)
SOAK_S = float(os.environ.get("ROBOT_AGENT_ESTOP_SOAK_S", "60"))
REASON = "operator pressed STOP in the console"


def hub_demo(hub: ArtexHub):
    """The demo pattern of scripts/artex_hub.py --demo (forward, left, back, right, stop, repeated)."""
    spec = importlib.util.spec_from_file_location("artex_hub_script", ROOT / "scripts" / "artex_hub.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._Console(hub, None).demo()


class DutyRecorder:
    """Every duty the motor emulator hands to the tank physics (wraps ``TankPhysics.set_duty``)."""

    def __init__(self, physics) -> None:
        self._set = physics.set_duty
        self._lock = threading.Lock()
        self.writes = 0
        self.nonzero: list[tuple[float, float]] = []
        physics.set_duty = self

    def __call__(self, left: float, right: float) -> None:
        with self._lock:
            self.writes += 1
            if left != 0.0 or right != 0.0:
                self.nonzero.append((left, right))
        self._set(left, right)

    def reset(self) -> None:
        with self._lock:
            self.writes, self.nonzero = 0, []


class Streams:
    """Motion streamed by the four peers until cancelled; each one can be stopped on its own."""

    def __init__(self) -> None:
        self.tasks: dict[str, asyncio.Task] = {}

    def start(self, name: str, coro) -> None:
        self.tasks[name] = asyncio.ensure_future(coro)

    async def stop(self, *names: str) -> None:
        for name in names or list(self.tasks):
            task = self.tasks.pop(name)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


async def every(period_s: float, send) -> None:
    while True:
        with contextlib.suppress(ConnectionError, OSError):
            await send()
        await asyncio.sleep(period_s)


class Rig:
    """The agent, its four peers and the readers of every channel."""

    def __init__(self, agent, hub, robot, peer, sub, act, ws, status_file, notified) -> None:
        self.agent, self.hub, self.robot, self.peer, self.sub, self.act, self.ws = agent, hub, robot, peer, sub, act, ws
        self.status_file, self.notified = status_file, notified
        self.console_states: list[dict] = []
        self.console_errors: list[str] = []
        self.rm_states: list = []

    async def read_console(self) -> None:
        async for msg in self.ws:
            if msg.type == aiohttp.WSMsgType.TEXT:
                data = json.loads(msg.data)
                if data["type"] == "state":
                    self.console_states.append(data)
                elif data["type"] == "error":
                    self.console_errors.append(data["message"])

    async def read_robot_msg(self) -> None:
        while True:
            self.rm_states.append(rm.decode(await self.sub.recv()))
            del self.rm_states[:-20]

    # ------------------------------------------------------------------ what each channel shows
    def hub_shows(self) -> dict | None:
        return self.hub.telem[-1][1] if self.hub.telem else None

    def sim2bot_shows(self) -> dict | None:
        state = self.robot.state()
        return next((s for s in state.sensors if s["name"] == "control"), None) if state else None

    def robot_msg_shows(self) -> dict[str, float]:
        if not self.rm_states:
            return {}
        return {a.name: a.data[0] for a in self.rm_states[-1].metadata.aux if a.shape == []}

    def console_shows(self) -> dict | None:
        return self.console_states[-1]["safety"] if self.console_states else None

    def status_shows(self) -> dict | None:
        try:
            return json.loads(self.status_file.read_text())["safety"]
        except (OSError, ValueError, KeyError):
            return None

    def every_channel(self, estop: bool) -> dict[str, bool]:
        """Channel -> it shows the console's e-stop (``estop`` True) or shows none (False)."""
        hub, s2b, rmsg, con, st = (self.hub_shows(), self.sim2bot_shows(), self.robot_msg_shows(),
                                   self.console_shows(), self.status_shows())
        line = self.notified[-1] if self.notified else ""
        if estop:
            return {
                "artex": bool(hub) and hub["estop"] is True and "emergency stop set by console" in hub["halt"]
                and REASON in hub["halt"] and hub["halts"][0]["by"] == "console",
                "sim2bot": bool(s2b) and s2b["estop"] is True and s2b["halts"][0]["reason"] == REASON,
                "robot_msg": rmsg.get("estop") == 1.0 and rmsg.get("halt.estop.by") == 1.0
                and rmsg.get("halt.estop.since", 0) > 1e9,
                "console": bool(con) and con["estop"] is True and con["halts"][0]["by"] == "console"
                and con["halts"][0]["since_unix_s"] > 1e9,
                "status": bool(st) and st["estop"] is True and REASON in st["halt"],
                "STATUS=": line.startswith("STATUS=HALTED: emergency stop set by console") and REASON in line,
            }
        return {"artex": bool(hub) and hub["estop"] is False and hub["halt"] == "",
                "sim2bot": bool(s2b) and s2b["estop"] is False,
                "robot_msg": rmsg.get("estop") == 0.0 and "halt.estop.since" not in rmsg,
                "console": bool(con) and con["estop"] is False,
                "status": bool(st) and st["estop"] is False,
                "STATUS=": bool(line) and "HALTED" not in line}


@contextlib.asynccontextmanager
async def rig(tmp_path: Path):
    bridge = Bridge()
    await asyncio.to_thread(bridge.start)
    hub = ArtexHub(ready_delay_s=0.05)
    await hub.start()
    port = free_port()
    artex = artex_params(hub)
    cfg = deep_merge(rm_config(), {"server": artex["server"], "port": artex["port"], "artex": artex["artex"],
                                   "sim2bot": {"enabled": True, "url": bridge.url, "reconnect_delay_s": 0.1,
                                               "reconnect_delay_max_s": 0.5},
                                   "console": {"enabled": True, "port": port}, "drivers": {"cameras": []},
                                   # a stream stalled by a loaded machine is not a pause (a pause re-engages)
                                   "control": {"sources": {s: {"priority": p, "timeout_s": 2.0} for s, p in
                                                           (("artex", 10), ("sim2bot", 20), ("robot_msg", 30),
                                                            ("console", 40))}}})
    tasks: list[asyncio.Task] = []
    try:
        async with running_agent(cfg) as agent, controller(bridge) as robot, aiohttp.ClientSession() as http:
            assert await wait_for(lambda: hub.connected and hub.heartbeats, 10), "ARTEX never came up"
            await asyncio.wait_for(agent.adapters["console"].ready.wait(), 10.0)
            peer = Controller(agent)
            assert await wait_for(lambda: peer.status()["connected"], 10.0)
            act = await peer.publisher("action")
            sub = await peer.subscriber()
            ws = await http.ws_connect(f"http://127.0.0.1:{port}/ws")
            status_file = tmp_path / "status.json"
            notified: list[str] = []
            reporter = StatusReporter(agent, notified.append, status_file)
            r = Rig(agent, hub, robot, peer, sub, act, ws, status_file, notified)
            tasks += [asyncio.ensure_future(c) for c in (r.read_console(), r.read_robot_msg(), reporter.run())]
            try:
                yield r
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                await ws.close()
                peer.close()
    finally:
        await hub.stop()
        await asyncio.to_thread(bridge.stop)


def start_streams(r: Rig, streams: Streams) -> None:
    streams.start("artex", hub_demo(r.hub))
    streams.start("sim2bot", every(0.1, lambda: asyncio.to_thread(r.robot.base_velocity, vx=0.3, omega=0.0)))
    streams.start("robot_msg", every(0.05, lambda: r.peer.send(r.act, u_rt(0.4))))
    streams.start("console", console_key(r))


def console_key(r: Rig):
    """A held key in the console tab: the first drive of the press says so, then the repeats."""
    first = [True]

    def drive():
        press, first[0] = first[0], False
        return r.ws.send_json({"type": "drive", "vx": 0.5, "omega": 0.0, "press": press})
    return every(0.1, drive)


def counts(r: Rig) -> dict[str, int]:
    """Refused motion commands per source, as each adapter counts them."""
    rmst = r.peer.status()
    return {"artex": r.agent.adapters["artex"].status().get("rejected", 0),
            "sim2bot": r.agent.adapters["sim2bot"].status().get("rejected", 0),
            "robot_msg": rmst["rejected_reasons"].get("refused", 0),
            "console": r.agent.adapters["console"].status().get("refused", 0)}


async def estop_hold(r: Rig, hold_s: float) -> None:
    """Every source streams, the console's e-stop is set and held ``hold_s`` s; the checks of the module
    docstring. Ends released, streams stopped."""
    duty = DutyRecorder(r.agent.physics)
    streams = Streams()
    start_streams(r, streams)
    try:
        motor = r.agent.sim.motor_emulator
        assert await wait_for(lambda: motor.motor_duty != [0.0, 0.0], 10), "nobody drove before the e-stop"
        assert await wait_for(lambda: all(r.every_channel(False).values()), 10), r.every_channel(False)

        assert r.agent.control.estop("console", REASON) is True
        assert await wait_for(lambda: motor.motor_duty == [0.0, 0.0], 1.0)
        duty.reset()                                     # from the first zero on, every duty must be zero
        before = counts(r)
        t0 = time.monotonic()
        assert await wait_for(lambda: all(r.every_channel(True).values()), 10), r.every_channel(True)

        await r.hub.stop()                               # the hub goes away and comes back: a reconnect
        await r.hub.start()
        assert await wait_for(lambda: r.hub.connected and r.hub.heartbeats, 15), "ARTEX did not reconnect"
        r.hub.telem.clear()
        assert await wait_for(lambda: r.hub_shows() is not None and r.hub_shows()["estop"] is True, 10)

        await asyncio.sleep(max(0.0, hold_s - (time.monotonic() - t0)))
        assert all(r.every_channel(True).values()), r.every_channel(True)
        after = counts(r)
        refused = {k: after[k] - before[k] for k in after}
        assert all(n > 0 for n in refused.values()), refused          # every source, the setter included
        assert any("refused:" in e and "emergency stop set by console" in e for e in r.console_errors)
        assert duty.writes > 0 and duty.nonzero == [], duty.nonzero[:5]
        assert r.agent.physics.duty == [0.0, 0.0]

        # release: sim2bot, robot_msg and the console stream on; they streamed into the e-stop, so
        # nothing moves until one re-engages (the hub's demo is stopped: its own stops re-engage it)
        await streams.stop("artex")
        r.agent.control.release_estop("console")
        assert await wait_for(lambda: all(r.every_channel(False).values()), 10), r.every_channel(False)
        released = counts(r)                             # each streaming source had 3 commands refused since
        assert await wait_for(lambda: all(counts(r)[k] >= released[k] + 3 for k in ("sim2bot", "robot_msg", "console")),
                              10), (released, counts(r))
        assert duty.nonzero == [] and motor.motor_duty == [0.0, 0.0]
        assert r.agent.control.snapshot().active_source == ""
        await streams.stop("console")                   # a new key-down: the console sends a zero, then the drive
        streams.start("console", console_key(r))
        assert await wait_for(lambda: motor.motor_duty[0] > 0.0, 5), "the fresh console command did not drive"
        assert r.agent.control.snapshot().active_source == "console"
    finally:
        await streams.stop()


async def test_estop_refuses_every_source_every_channel_shows_it_and_release_moves_nothing(tmp_path):
    async with rig(tmp_path) as r:
        await estop_hold(r, 3.0)


@pytest.mark.slow
async def test_estop_soak(tmp_path):
    async with rig(tmp_path) as r:
        await estop_hold(r, SOAK_S)
