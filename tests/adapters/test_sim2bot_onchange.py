"""Sim2Bot telemetry on change: polled at ``telemetry_hz``, sent when the robot changed beyond noise, and
at least every ``telemetry_keepalive_s`` (virtual clock; then the real bridge and ``sim2bot.Robot``)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from agent.adapters.sim2bot import Sim2botAdapter
from agent.adapters.sim2bot_telemetry import ChangeGate, change_key
from agent.config import AgentConfig
from agent.model import DeviceHealth, Halt, SafetyState
from agent.testing.clock import VirtualClock
from agent.testing.running_agent import running_agent, sim_config, wait_for
from agent.testing.sim2bot_bridge import Bridge, agent_params, controller
from tests.adapters.test_sim2bot_telemetry import DESC, Socket, snap

pytestmark = pytest.mark.filterwarnings("ignore:connect\\(\\) must be used as a context manager")


def test_the_gate_tells_a_change_from_noise():
    gate = ChangeGate()
    base = snap(1, 1.0)
    assert gate.due(change_key(base))                         # nothing sent yet
    gate.mark_sent(change_key(base))
    later = dataclasses.replace(base, seq=2, t_mono_s=1.5, t_unix_s=base.t_unix_s + 0.5)
    assert not gate.due(change_key(later))                    # only the times moved
    noisy = dataclasses.replace(later, imu=dataclasses.replace(base.imu, accel_mps2=(0.15, -0.1, 9.95)))
    assert not gate.due(change_key(noisy))                    # within the IMU's 0.2 m/s^2
    cases = {
        "tilted": dataclasses.replace(later, imu=dataclasses.replace(base.imu, accel_mps2=(0.3, 0.0, 9.81))),
        "moved": dataclasses.replace(later, odom=dataclasses.replace(base.odom, x_m=0.006)),
        "one count": dataclasses.replace(later, tracks=dataclasses.replace(base.tracks, left_counts=11)),
        "imu gone": dataclasses.replace(later, imu=None),
        "temperature unknown": dataclasses.replace(later, imu=dataclasses.replace(base.imu, temperature_c=None)),
        "joint": dataclasses.replace(later, joints=dataclasses.replace(base.joints, q=(0.11, -0.2))),
        "device error": dataclasses.replace(later, devices=(DeviceHealth("imu", "degraded", "i2c NAK", 1),)),
        "halted": dataclasses.replace(later, safety=SafetyState(halts=(Halt("estop", "x", "cli", 1.0),))),
        "source": dataclasses.replace(later, active_source="artex"),
    }
    for name, changed in cases.items():
        assert gate.due(change_key(changed)), name
    assert gate.due(change_key(later, "another simulator joined the room"))
    gone = cases["imu gone"]
    gate.mark_sent(change_key(gone))
    assert not gate.due(change_key(dataclasses.replace(gone, seq=3)))   # absent on both sides: no change


class Robot:
    """The RobotPort reads of the telemetry loop: the tick time moves on; values change when the test says."""

    def __init__(self, clock: VirtualClock) -> None:
        self.description = DESC
        self.clock = clock
        self.seq = 0
        self.x = 0.0
        self.accel_noise = 0.0
        self.safety = SafetyState()

    def snapshot(self):
        self.seq += 1
        s = snap(self.seq, self.clock.time(), x=self.x)
        imu = dataclasses.replace(s.imu, accel_mps2=(self.accel_noise, 0.0, 9.81))
        return dataclasses.replace(s, imu=imu, tracks=dataclasses.replace(s.tracks, left_counts=0, right_counts=0),
                                   safety=self.safety)

    def samples_since(self, seq: int, limit: int = 256):
        return []


def loop(hz: float, keepalive_s: float):
    clock = VirtualClock(start=100.0)
    cfg = AgentConfig.model_validate(sim_config(sim2bot={"enabled": True, "telemetry_hz": hz,
                                                         "telemetry_keepalive_s": keepalive_s}))
    robot = Robot(clock)
    adapter = Sim2botAdapter(cfg, robot, None, clock=clock.time, sleep=clock.sleep)
    return adapter, robot, clock, Socket(clock)


async def run_until(adapter, clock, ws, predicate) -> None:
    clock.stop_when(predicate)
    with pytest.raises(asyncio.CancelledError):
        await adapter.rooms[0]._telemetry(ws)


async def test_a_still_robot_sends_a_keepalive_per_period_and_noise_sends_nothing():
    adapter, robot, clock, ws = loop(20.0, 1.0)
    step = iter([0.0, 0.03, -0.04, 0.02] * 100)        # m/s^2: below the IMU's 0.2 deadband

    def noisy() -> bool:
        robot.accel_noise = next(step)
        return len(ws.sent) >= 4
    await run_until(adapter, clock, ws, noisy)
    times = [t for t, _ in ws.sent]
    assert [b - a for a, b in zip(times, times[1:])] == pytest.approx([1.0, 1.0, 1.0])
    assert all(p == pytest.approx(0.05) for p in clock.sleeps)        # still polled at telemetry_hz
    room = adapter.rooms[0].status().detail
    assert room["sent"] == 4 and room["telemetry_unchanged"] >= 3 * 19
    assert ws.sent[-1][1]["type"] == "telemetry" and ws.sent[-1][1]["t"] == pytest.approx(times[-1], abs=0.06)


async def test_a_change_goes_out_at_the_next_poll():
    adapter, robot, clock, ws = loop(20.0, 5.0)
    changes = {2.0: ("x", 0.5), 3.0: ("estop", None)}
    done = set()

    def script() -> bool:
        for at, (what, value) in changes.items():
            if clock.time() >= 100.0 + at and at not in done:
                done.add(at)
                if what == "x":
                    robot.x = value
                else:
                    robot.safety = SafetyState(halts=(Halt("estop", "test", "console", 1.7e9),))
        return len(ws.sent) >= 3
    await run_until(adapter, clock, ws, script)
    (t0, _), (t1, p1), (t2, p2) = ws.sent
    assert t0 == pytest.approx(100.05) and t1 == pytest.approx(102.0, abs=0.051) and t2 == pytest.approx(103.0, abs=0.051)
    assert p1["tcp"][0] == 0.5
    control = next(s for s in p2["sensors"] if s["name"] == "control")
    assert control["estop"] is True and control["halted"] is True


async def test_keepalive_zero_sends_at_every_poll():
    adapter, robot, clock, ws = loop(20.0, 0.0)
    await run_until(adapter, clock, ws, lambda: len(ws.sent) >= 10)
    times = [t for t, _ in ws.sent]
    assert [b - a for a, b in zip(times, times[1:])] == pytest.approx([0.05] * 9)


# ---------------------------------------------------------------- at the real peer


@pytest.fixture(scope="module")
def bridge():
    with Bridge() as b:
        yield b


async def test_a_still_tank_keeps_its_telemetry_alive_and_a_change_arrives(bridge):
    """At rest the controller still gets packets (the keepalive) with a moving tick time, not one per poll;
    an e-stop reaches it in the next packet."""
    params = agent_params(bridge, telemetry_hz=20, telemetry_keepalive_s=0.5)
    async with running_agent(params) as agent, controller(bridge) as robot:
        seen = []
        robot.on_telemetry(seen.append)
        assert await wait_for(lambda: len(seen) >= 4, 10)
        room = agent.adapters["sim2bot"].rooms[0]
        start = len(seen)
        assert await wait_for(lambda: len(seen) >= start + 3, 10)
        still = seen[start - 1:]
        gaps = [b.t - a.t for a, b in zip(still, still[1:])]
        # at rest the packets are keepalives: each carries a newer tick, and they are not one per 50 ms poll
        assert all(g > 0 for g in gaps) and max(gaps) >= 0.3, gaps
        assert room.telemetry_unchanged > 0
        agent.control.estop("console", "on-change test")

        def estop_seen() -> bool:
            control = next(s for s in seen[-1].sensors if s["name"] == "control")
            return control["estop"] is True
        assert await wait_for(estop_seen, 5)
