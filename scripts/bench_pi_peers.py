"""The peers of scripts/bench_pi.py (run in the parent, outside the quota): an ARTEX hub, the real
``sim2bot bridge`` with a ``sim2bot.Robot``, a robot_msg action publisher and state subscriber;
their bare relays; the command trials; matching sends to the emulator's duty events.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import warnings

import socketio
import zmq
import zmq.asyncio
import robot_msg as rm
from sim2bot import Robot

from agent.testing.artex_hub import ArtexHub
from agent.testing.ports import free_ports
from agent.testing.sim2bot_bridge import Bridge
from bench_sim2bot import pct, relay_latency

PROTOCOLS = ("artex", "sim2bot", "robot_msg")
#: Pause after a trial's stop before the next command: the source's 0.5 s timeout passes.
SETTLE_S = 0.6
#: How long a trial's motion command stands before its stop, s (a receipt later than that is a miss).
MOTION_S = 0.15


def u_rt(vx: float) -> bytes:
    return rm.encode(rm.RobotAction(frame_id="base_link", real_time_action=rm.RobotActionRealTimeAction(u_rt=[vx, 0.0])))


class Peers:
    """Hub, bridge, Sim2Bot controller, ZeroMQ action publisher and state subscriber."""

    async def start(self) -> None:
        warnings.filterwarnings("ignore", message=r"connect\(\) must be used as a context manager")
        self.hub = ArtexHub(ready_delay_s=0.05)
        self.artex_port = await self.hub.start()
        self.bridge = Bridge()
        await asyncio.to_thread(self.bridge.start)
        self.state_port, self.command_port, self.action_port = free_ports(3)
        self.ctx = zmq.asyncio.Context()
        self.states = 0

    def ports(self) -> dict:
        return {"artex": self.artex_port, "sim2bot": self.bridge.url, "state": self.state_port,
                "command": self.command_port, "action": self.action_port}

    async def stop(self) -> None:
        self.ctx.destroy(linger=0)
        await asyncio.to_thread(self.bridge.stop)
        await self.hub.stop()

    async def _connected(self) -> tuple[Robot, zmq.asyncio.Socket]:
        deadline = time.monotonic() + 30
        while not self.hub.heartbeats and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        robot = Robot(url=self.bridge.url)
        await asyncio.to_thread(robot.connect)
        await asyncio.to_thread(robot.wait_for_sim, 30.0, 0.1)
        robot.on_telemetry(lambda _state: None)
        act = self.ctx.socket(zmq.XPUB)
        act.setsockopt(zmq.LINGER, 0)
        act.connect(f"tcp://127.0.0.1:{self.action_port}")
        await asyncio.wait_for(act.recv(), 30)          # the agent's subscription is live
        sub = self.ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(f"tcp://127.0.0.1:{self.state_port}")
        self._sub_task = asyncio.ensure_future(self._count_states(sub))
        return robot, act

    async def _count_states(self, sub) -> None:
        while True:
            await sub.recv()
            self.states += 1

    async def drive(self, trials: int, seconds: float, relays=None,
                    protocols: tuple[str, ...] = PROTOCOLS) -> dict[str, list[float]]:
        """Round-robin trials per protocol until ``seconds`` after connecting; send times (monotonic).

        With ``relays`` (scripts/bench_pi_relay.Relays, started here), each agent trial is followed
        by one trial of the same protocol's bare relay (its receiver in a process of its own): the
        figures in ``self.relay_times`` (s, None lost) and the one-minute load average at each
        round in ``self.loads`` come from the same minutes as the agent's. ``protocols``: the ones
        tried (the others' adapters still run and carry their streams)."""
        robot, act = await self._connected()
        if relays is not None:
            await relays.start(self.hub, self.bridge, self.ctx)
        agent_sid = relays.agent_sid if relays is not None else None
        self.relay_times: dict[str, list[float | None]] = {p: [] for p in protocols}
        self.loads: list[float] = []
        sends: dict[str, list[float]] = {p: [] for p in protocols}
        motion = {"artex": lambda: self.hub.command({"drive": {"vx": 0.3, "omega": 0.0}}, sid=agent_sid),
                  "sim2bot": lambda: asyncio.to_thread(robot.base_velocity, vx=0.3),
                  "robot_msg": lambda: act.send(u_rt(0.3))}
        halt = {"artex": lambda: self.hub.command({"com": "stop"}, sid=agent_sid),
                "sim2bot": lambda: asyncio.to_thread(robot.stop),
                "robot_msg": lambda: act.send(u_rt(0.0))}
        end = time.monotonic() + seconds
        for _ in range(trials):
            self.loads.append(os.getloadavg()[0])
            for proto in protocols:
                if time.monotonic() > end - 1.0:
                    break
                await asyncio.sleep(random.uniform(0.0, 0.02))       # any tick phase
                sends[proto].append(time.monotonic())
                try:
                    await motion[proto]()
                    await asyncio.sleep(MOTION_S)
                    await halt[proto]()
                except ConnectionError as err:                       # counted as a miss
                    print(f"  {proto}: trial lost: {err}")
                await asyncio.sleep(SETTLE_S)
                if relays is not None:
                    await asyncio.sleep(random.uniform(0.0, 0.02))
                    self.relay_times[proto].append(await relays.trial(proto, u_rt(0.3)))
        while time.monotonic() < end:
            await asyncio.sleep(0.2)
        self._sub_task.cancel()
        await asyncio.to_thread(robot.close)
        if relays is not None:
            await relays.stop()
        return sends


def first_motion(events: list, t0: float) -> float | None:
    """The time of the first nonzero duty the emulator applied after ``t0``, s, or None."""
    return next((t for t, left, right in events if t > t0 and (left or right)), None)


def latencies(sends: dict[str, list[float]], events: list) -> dict[str, list[float]]:
    """Per protocol: send -> first nonzero duty the emulator applied after it, s (misses left out)."""
    out: dict[str, list[float]] = {}
    for proto, times in sends.items():
        out[proto] = []
        for t0 in times:
            first = first_motion(events, t0)
            if first is not None and first - t0 < MOTION_S:
                out[proto].append(first - t0)
    return out


def split(sends: dict[str, list[float]], submits: list, events: list) -> dict[str, tuple[list[float], list[float]]]:
    """Per protocol: (send -> the agent's submit, submit -> the emulator's first nonzero duty), s, for
    the trials whose adapter submitted within MOTION_S (the agent's submit times are bench-only)."""
    out: dict[str, tuple[list[float], list[float]]] = {}
    for proto, times in sends.items():
        before, after = [], []
        for t0 in times:
            t1 = next((t for t, src in submits if t > t0 and src == proto), None)
            first = first_motion(events, t0)
            if t1 is None or first is None or first - t0 >= MOTION_S or t1 > first:
                continue
            before.append(t1 - t0)
            after.append(first - t1)
        out[proto] = (before, after)
    return out


# ---------------------------------------------------------------------- bare relays
async def artex_relay(hub, port: int, trials: int) -> list[float]:
    """Hub ``command`` -> a bare python-socketio client on /robot, s."""
    got: dict[float, float] = {}
    client = socketio.AsyncClient()

    @client.on("command", namespace="/robot")
    async def _command(data) -> None:
        got[data["payload"]["drive"]["vx"]] = time.monotonic()

    @client.on("heartbeat", namespace="/robot")
    async def _heartbeat(*_args):
        return {}

    await client.connect(f"http://127.0.0.1:{port}", namespaces=["/robot"])
    await asyncio.sleep(0.3)
    out = []
    for i in range(trials):
        key = 0.001 * (i + 1)
        t0 = time.monotonic()
        await hub.command({"drive": {"vx": key, "omega": 0.0}})
        while key not in got and time.monotonic() - t0 < 2.0:
            await asyncio.sleep(0.0002)
        if key in got:
            out.append(got[key] - t0)
        await asyncio.sleep(0.01)
    await client.disconnect()
    return out


def zmq_relay(trials: int) -> list[float]:
    """PUB -> SUB of one u_rt message on loopback TCP, s."""
    ctx = zmq.Context()
    pub, sub = ctx.socket(zmq.PUB), ctx.socket(zmq.SUB)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(f"tcp://127.0.0.1:{port}")
    time.sleep(0.3)
    out = []
    try:
        for _ in range(trials):
            t0 = time.monotonic()
            pub.send(u_rt(0.3))
            if sub.poll(2000):
                sub.recv()
                out.append(time.monotonic() - t0)
            time.sleep(0.01)
    finally:
        ctx.destroy(linger=0)
    return out


async def relay_figures(peers: Peers, trials: int) -> dict[str, list[float]]:
    """The bare relay of each transport, measured before the agent starts."""
    return {"artex": await artex_relay(peers.hub, peers.artex_port, trials),
            "sim2bot": await asyncio.to_thread(relay_latency, peers.bridge, trials),
            "robot_msg": await asyncio.to_thread(zmq_relay, trials)}

