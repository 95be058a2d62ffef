"""The stop model (docs/safety.md) on real peers, every source at once.

One agent on the simulated tank runs all four command sources, each driven by its real peer on
loopback: the ARTEX hub (python-socketio, agent.testing.artex_hub), a ``sim2bot.Robot``
controller through the real ``sim2bot bridge`` subprocess, a robot_msg controller publishing
library-encoded envelopes over ZeroMQ, and a console tab on the console's WebSocket. Distances
are the odometry of the emulated tank (encoder counts from its RoboClaw emulator); "still" is
zero duty at the motor emulator. Bounds are loose: timing figures belong in benchmarks.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import aiohttp
import pytest
import robot_msg as rm
import zmq
import zmq.asyncio
from robot_msg import ControllerCommand, RobotAction, RobotActionRealTimeAction

from agent.testing.artex_hub import ArtexHub
from agent.testing.ports import free_port
from agent.testing.running_agent import deep_merge, running_agent, sim_config, wait_for
from agent.testing.sim2bot_bridge import Bridge, controller

pytestmark = [pytest.mark.timeout(120),
              # sim2bot.Robot (the peer, not ours) calls a websockets API that warns
              pytest.mark.filterwarnings("ignore:connect\\(\\) must be used as a context manager")]

SOURCES = ("artex", "sim2bot", "robot_msg", "console")        # priorities 10, 20, 30, 40 (params.json)
VX = 0.3          # m/s, the speed every source streams
PERIOD_S = 0.1    # s between repeats of a motion command, as an operator UI sends them


@pytest.fixture(scope="module")
def bridge():
    with Bridge() as b:
        yield b


class Peers:
    """The four real peers of one running agent; ``drive`` / ``zero`` / ``stop`` speak each protocol."""

    def __init__(self, agent, hub: ArtexHub, robot, ws: aiohttp.ClientWebSocketResponse,
                 ctx: zmq.asyncio.Context) -> None:
        self.agent, self.hub, self.robot, self.ws, self.ctx = agent, hub, robot, ws, ctx
        self.console_errors: list[str] = []
        self.action: zmq.asyncio.Socket | None = None
        self.command: zmq.asyncio.Socket | None = None

    async def publishers(self) -> None:
        """XPUBs on the agent's robot_msg action and command sockets, once its subscriptions are live."""
        status = self.agent.adapters["robot_msg"].status()
        socks = []
        for which in ("action", "command"):
            sock = self.ctx.socket(zmq.XPUB)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(status["endpoints"][which])
            assert (await asyncio.wait_for(sock.recv(), 5))[:1] == b"\x01"
            socks.append(sock)
        self.action, self.command = socks

    async def read_console(self) -> None:
        async for msg in self.ws:
            if msg.type == aiohttp.WSMsgType.TEXT:
                data = msg.json()
                if data.get("type") == "error":
                    self.console_errors.append(data["message"])

    async def drive(self, source: str, vx: float = VX) -> None:
        """One motion command (a twist: ``vx`` m/s forward, no turn) from ``source``'s peer."""
        if source == "artex":
            await self.hub.command({"drive": {"vx": vx, "omega": 0.0}})
        elif source == "sim2bot":
            self.robot.base_velocity(vx=vx)
        elif source == "robot_msg":
            await self.action.send(rm.encode(RobotAction(
                frame_id="base_link", real_time_action=RobotActionRealTimeAction(u_rt=[vx, 0.0]))))
        else:
            await self.ws.send_json({"type": "drive", "vx": vx, "omega": 0.0})

    async def zero(self, source: str) -> None:
        """An explicit zero velocity command: how a source latched out by a stop re-engages."""
        await self.drive(source, 0.0)

    async def stop(self, source: str) -> None:
        if source == "artex":
            await self.hub.command({"com": "stop"})
        elif source == "sim2bot":
            self.robot.stop()
        elif source == "robot_msg":
            await self.command.send(rm.encode(ControllerCommand(ctrl_mode=0)))
        else:
            await self.ws.send_json({"type": "stop"})

    async def stream(self, seconds: float, *sources: str) -> None:
        """Every source in ``sources`` repeats its motion command every PERIOD_S for ``seconds``."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for source in sources:
                await self.drive(source)
            await asyncio.sleep(PERIOD_S)

    def refusals(self, source: str) -> int:
        """Commands the control loop refused, as ``source``'s own channel counts them."""
        status = self.agent.adapters[source].status().as_dict()
        if source == "robot_msg":
            return status["rejected_reasons"].get("refused", 0)
        return status.get("refused" if source == "console" else "rejected", 0)

    # ------------------------------------------------------------------ the tank
    def distance(self) -> float:
        return self.agent.control.snapshot().odom.distance_m

    def still(self) -> bool:
        return self.agent.physics.duty == [0.0, 0.0] and abs(self.agent.physics.vx_mps) < 0.005

    async def leg(self, source: str, seconds: float = 2.0) -> float:
        """Stream ``seconds`` from ``source``, then its stop; the distance covered until the tank is still, m."""
        start = self.distance()
        await self.stream(seconds, source)
        await self.stop(source)
        assert await wait_for(self.still, 5), "the tank did not come to rest after the stop"
        return self.distance() - start


@contextlib.asynccontextmanager
async def sampling_duty(agent, out: list[float]):
    """Record the largest absolute duty at the motor emulator every ~10 ms while the block runs."""
    async def sample() -> None:
        while True:
            out.append(max(abs(d) for d in agent.physics.duty))
            await asyncio.sleep(0.01)

    task = asyncio.ensure_future(sample())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.fixture
async def peers(bridge):
    hub = ArtexHub(ready_delay_s=0.05)
    await hub.start()
    port = free_port()
    params = sim_config(**deep_merge({
        "server": "http://127.0.0.1", "port": hub.port,
        "artex": {"reconnect_delay_s": 0.2, "reconnect_delay_max_s": 0.5},
        "sim2bot": {"enabled": True, "url": bridge.url, "room": f"stop-{port}",
                    "reconnect_delay_s": 0.1, "reconnect_delay_max_s": 0.5},
        "robot_msg": {"enabled": True, "reconnect_delay_s": 0.05, "state": {"address": "tcp://127.0.0.1:*"},
                      "command": {"address": "tcp://127.0.0.1:*"}, "action": {"address": "tcp://127.0.0.1:*"}},
        "console": {"enabled": True, "port": port},
        "drivers": {"cameras": []},
        # a pause of a source's timeout re-engages it (docs/safety.md): 1.5 s, so that a loaded
        # machine's stall between two of a test's commands is not taken for one
        "watchdog": {"velocity_timeout_s": 1.5},
    }, {}))
    ctx = zmq.asyncio.Context()
    try:
        async with running_agent(params) as agent:
            assert await wait_for(lambda: hub.heartbeats, 10), "ARTEX: no heartbeat answer"
            await asyncio.wait_for(agent.adapters["console"].ready.wait(), 10.0)
            assert await wait_for(lambda: agent.adapters["robot_msg"].status()["connected"], 5)
            async with controller(bridge, room=f"stop-{port}") as robot, aiohttp.ClientSession() as http, \
                    http.ws_connect(f"http://127.0.0.1:{port}/ws") as ws:
                p = Peers(agent, hub, robot, ws, ctx)
                await p.publishers()
                reader = asyncio.ensure_future(p.read_console())
                try:
                    yield p
                finally:
                    reader.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await reader
    finally:
        ctx.destroy(linger=0)
        await hub.stop()


@pytest.mark.parametrize("source", SOURCES)
async def test_the_stopper_streams_again_0_2_s_after_its_stop_and_covers_the_distance(peers, source):
    from_rest = await peers.leg(source)                      # a 2 s drive from rest, ended by a stop
    assert from_rest > 0.3, f"a 2 s drive at {VX} m/s covered only {from_rest:.3f} m"
    await peers.stream(0.5, source)                          # stream (5 commands), stop, 0.2 s pause, stream 2 s
    await peers.stop(source)
    await asyncio.sleep(0.2)
    again = await peers.leg(source)
    print(f"\n{source}: 2 s drive {again:.3f} m 0.2 s after its stop, {from_rest:.3f} m from rest")
    # a swallowed press refuses the whole stream (no pause re-engages it): ~0 m and refusals; a
    # loaded machine delays some commands of either leg, hence 0.75, not 1
    assert peers.refusals(source) == 0
    assert again >= 0.75 * from_rest, f"{again:.3f} m after the stop vs {from_rest:.3f} m from rest"


# (latched-out B, stopper A, lower source C streaming meanwhile or None)
CASES = [("console", "artex", "sim2bot"), ("robot_msg", "console", "sim2bot"),
         ("sim2bot", "robot_msg", "artex"), ("artex", "sim2bot", None)]


@pytest.mark.parametrize("b, a, c", CASES, ids=[case[0] for case in CASES])
async def test_a_source_streaming_when_another_stops_stays_stopped_until_it_re_engages(peers, b, a, c):
    async def b_streams() -> None:        # B streams through A's stop with no pause (a pause would re-engage it)
        while True:
            await peers.drive(b)
            await asyncio.sleep(PERIOD_S)

    b_stream = asyncio.ensure_future(b_streams())
    try:
        assert await wait_for(lambda: peers.agent.control.snapshot().active_source == b
                              and peers.agent.physics.duty[0] > 0.0, 3)          # B drives the tank
        await peers.stop(a)
        assert await wait_for(lambda: peers.agent.control.snapshot().stopped               # A's stop applied
                              and peers.agent.physics.duty == [0.0, 0.0], 2)
        before = peers.refusals(b)
        duties: list[float] = []
        async with sampling_duty(peers.agent, duties):       # B streams on; C (lower) starts streaming
            await peers.stream(1.5, *(s for s in (c,) if s))
    finally:
        b_stream.cancel()
        await asyncio.gather(b_stream, return_exceptions=True)
    assert max(duties) == 0.0, "the tank moved while the source streaming at the stop was latched out"
    assert peers.refusals(b) - before >= 10                  # ~15 commands refused, counted on B's own channel
    if b == "console":
        assert any(f"console was driving when {a} sent stop" in e for e in peers.console_errors)
    await peers.zero(b)                                       # B re-engages and drives at once, over C
    start = peers.distance()
    drive = asyncio.ensure_future(peers.stream(5.0, *(s for s in (b, c) if s)))
    try:
        assert await wait_for(lambda: peers.agent.control.snapshot().active_source == b, 1.0)
        # it drives: 0.1 m is ~0.5 s at VX with the ramp; a loaded machine may take longer
        assert await wait_for(lambda: peers.distance() - start > 0.1, 5.0), "B re-engaged but the tank did not move"
    finally:
        drive.cancel()
        await asyncio.gather(drive, return_exceptions=True)


async def test_the_console_re_engaged_overrides_the_hubs_stream_at_once(peers):
    """The operator holds a key while the hub streams forward and sends its stop: the hub does not
    take the tank; a new key-down (the page's zero, then drive) takes it back at once."""
    hub_stream = asyncio.ensure_future(peers.stream(4.0, "artex"))
    try:
        await peers.stream(0.5, "console")
        assert peers.agent.control.snapshot().active_source == "console"
        await peers.stop("artex")
        duties: list[float] = []
        async with sampling_duty(peers.agent, duties):
            # the stop takes effect (the tick that applies it may come late on a loaded machine)
            assert await wait_for(lambda: peers.agent.physics.duty == [0.0, 0.0], 2), "the hub's stop did not stop"
            duties.clear()
            await peers.stream(1.0, "console")                # the key still held: refused, the tank still
        assert max(duties) == 0.0, "the hub drove while the operator held the key"
        assert any("let go and press again" in e for e in peers.console_errors)
        await peers.zero("console")                           # a new key-down
        await peers.drive("console")
        t0 = time.monotonic()
        assert await wait_for(lambda: peers.agent.control.snapshot().active_source == "console", 1.0, 0.005)
        took = time.monotonic() - t0
        print(f"\nthe console re-engaged drives {took * 1000:.0f} ms after its drive was sent (the hub streaming)")
        assert took < 0.5, f"the console took {took:.3f} s to take over"
        assert not hub_stream.done()                          # the hub was streaming all along
    finally:
        hub_stream.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await hub_stream
