"""The failsafes on the simulated tank: real Hardware, real drivers, emulators, the real control loop.

Each condition is made by an emulator control (agent.devices.simtank.SimTank: ``drain_battery``, ``tilt``,
``obstacle``), never by a flag in the agent. The loop runs on an injected clock (``tick``); the
devices run in real time, so a test first waits until the drivers report the condition, then
steps the loop's time. The duty is read back from the tank physics the RoboClaw emulator writes.
"""

from __future__ import annotations

import re

import threading
import time

import pytest

from agent.config import AgentConfig
from agent.control import ControlLoop
from agent.errors import CommandDeclined
from agent.devices.hardware import Hardware
from agent.commands import BaseVelocity
from agent.devices.simtank import SimTank
from tests.agent.test_control import DT, Clock
from tests.agent.test_control import Rig as ControlRig
from tests.conftest import deep_merge, sim_config

WALL0 = 1_764_612_000.0


class Rig(ControlRig):
    """tests.agent.test_control's rig; ``tick`` can also stream a command."""

    def tick(self, n: int = 1, source: str | None = None, cmd=None):
        """``n`` ticks of DT; with ``source``, ``cmd`` is submitted before each (a stream)."""
        snap = None
        for _ in range(n):
            if source is not None:
                self.loop.submit(source, cmd)
            snap = super().tick()
        return snap


def until(predicate, timeout_s: float = 5.0) -> bool:
    """Wait (real time) until the devices report what ``predicate`` checks."""
    deadline = time.monotonic() + timeout_s
    pause = threading.Event()
    while not predicate():
        if time.monotonic() > deadline:
            return bool(predicate())
        pause.wait(0.01)
    return True


@pytest.fixture
def rig():
    made: list[Rig] = []

    def make(**overrides) -> Rig:
        data = sim_config()
        data["drivers"].pop("cameras")
        data["drivers"]["power"]["rate_hz"] = 20           # fresher battery readings: shorter waits
        cfg = AgentConfig.model_validate(deep_merge(data, overrides))
        sim = SimTank(cfg)
        hw = Hardware.from_config(cfg, sim)
        hw.start()
        clock = Clock()
        r = Rig(ControlLoop(cfg, hw, clock=clock, wall=lambda: WALL0 + clock.t), hw, sim, clock)
        made.append(r)
        return r

    yield make
    for r in made:
        r.loop.close(timeout_s=0.1)
        r.hw.close()
        r.sim.close()


def volts(r: Rig) -> float:
    p = r.hw.latest_power()
    return p.voltage_v if p is not None and p.voltage_v is not None else float("nan")


def refuses(r: Rig, source: str, cmd) -> str:
    with pytest.raises(CommandDeclined) as err:
        r.loop.submit(source, cmd)
    return err.value.reason


# ---------------------------------------------------------------------------- battery


def test_battery_low_limits_the_speed_and_lifts_on_recovery(rig):
    r = rig()
    fwd = BaseVelocity(1.0, 0.0)
    r.tick(30, "artex", fwd)
    assert r.duty == pytest.approx((1.0, 1.0), abs=1e-3)
    r.sim.drain_battery(3.55)                          # 10.65 V at rest: under low 10.8, over critical 10.35
    assert until(lambda: volts(r) < 10.7)
    snap = r.tick(int(3.5 / DT), "artex", fwd)          # average_s 1 s + low_for_s 2 s (params.json)
    assert snap.safety.speed_cap_mps == pytest.approx(0.5) and snap.safety.halts == ()
    assert snap.safety.speed_cap_reason.startswith("battery 10.") and "below low 10.80 V" in snap.safety.speed_cap_reason
    assert r.duty == pytest.approx((0.5, 0.5), abs=1e-3)
    r.sim.drain_battery(4.0)                            # charged: 12 V, above 10.8 + 0.3
    assert until(lambda: volts(r) > 11.5)
    snap = r.tick(int(1.5 / DT), "artex", fwd)          # the low average leaves the 1 s window
    assert snap.safety.speed_cap_mps is None and r.duty == pytest.approx((1.0, 1.0), abs=1e-3)


def test_battery_critical_trips_zeroes_and_latches_until_cleared_and_a_fresh_command(rig):
    r = rig()
    fwd = BaseVelocity(0.4, 0.0)
    r.tick(20, "sim2bot", fwd)
    r.sim.drain_battery(3.38)                          # 10.14 V: under critical 10.35
    assert until(lambda: volts(r) < 10.3)
    tripped = None
    for _ in range(int(3.0 / DT)):                     # critical_for_s 1 s + averaging 1 s
        try:
            snap = r.tick(1, "sim2bot", fwd)
        except CommandDeclined:
            snap = r.tick()
        if snap.safety.halts:
            tripped = snap
            break
    assert tripped is not None, "battery failsafe never tripped"
    (halt,) = tripped.safety.halts
    assert (halt.kind, halt.by, halt.cleared) == ("battery", "robot", False)
    assert "below critical 10.35 V" in halt.reason
    r.tick()                                           # the next tick: zero duty at the motor
    assert r.duty == (0.0, 0.0)
    assert refuses(r, "sim2bot", fwd) == "halted"
    r.tick(50)
    assert r.duty == (0.0, 0.0) and not r.tick().safety.halts[0].cleared    # the battery is still low
    r.sim.drain_battery(3.9)                           # 11.7 V: above critical + hysteresis
    assert until(lambda: volts(r) > 11.5)
    snap = r.tick(int(1.5 / DT))
    assert snap.safety.halts[0].cleared and r.duty == (0.0, 0.0)   # cleared, but no fresh command yet
    r.tick(50)
    assert r.duty == (0.0, 0.0) and r.loop.snapshot().safety.halts
    r.loop.submit("sim2bot", BaseVelocity(0.0, 0.0))   # it streamed into the halt: an explicit zero first
    snap = r.tick(25, "sim2bot", fwd)
    assert snap.safety.halts == () and r.duty[0] > 0.3


# ---------------------------------------------------------------------------- tilt


def test_tilt_trips_after_the_debounce_and_clears_when_level_and_commanded(rig):
    r = rig()
    fwd = BaseVelocity(0.3, 0.0)
    r.tick(10, "console", fwd)
    r.sim.tilt(roll_deg=50.0)
    assert until(lambda: r.hw.latest_imu() is not None and r.hw.latest_imu().accel_mps2[1] > 7.0)
    ticks = 0
    snap = r.loop.snapshot()
    while not snap.safety.halts:
        try:
            snap = r.tick(1, "console", fwd)
        except CommandDeclined:
            snap = r.tick()
        ticks += 1
        assert ticks < 100, "tilt failsafe never tripped"
    assert ticks * DT == pytest.approx(0.3, abs=2.5 * DT)     # the debounce, to a tick or two
    (halt,) = snap.safety.halts
    assert halt.kind == "tilt" and "over 40.0 deg for 0.3" in halt.reason, halt.reason
    roll = re.match(r"roll (-?[\d.]+) deg", halt.reason)        # the emulated IMU's noise: 50 deg to a degree
    assert roll and float(roll.group(1)) == pytest.approx(50.0, abs=1.5), halt.reason
    r.tick()
    assert r.duty == (0.0, 0.0)
    r.sim.tilt()                                        # level again
    assert until(lambda: abs(r.hw.latest_imu().accel_mps2[1]) < 1.0)
    snap = r.tick(2)
    assert snap.safety.halts[0].cleared and r.duty == (0.0, 0.0)
    r.loop.submit("console", BaseVelocity(0.0, 0.0))
    snap = r.tick(20, "console", fwd)
    assert snap.safety.halts == () and r.duty[0] > 0.2


# ---------------------------------------------------------------------------- stall


def stream_until_halt(r: Rig, source: str, cmd, limit_s: float):
    """Stream ``cmd`` until a halt shows; every 5 ticks (0.1 s) wait for a fresh motor reading (the
    stall check counts distinct readings: the loop's time may not run ahead of the devices')."""
    last = None
    for k in range(int(limit_s / DT)):
        if k % 5 == 0:
            assert until(lambda: r.hw.read_motor() is not last)
            last = r.hw.read_motor()
        try:
            snap = r.tick(1, source, cmd)
        except CommandDeclined:
            snap = r.tick()
        if snap.safety.halts:
            return k + 1, snap
    raise AssertionError(f"no failsafe within {limit_s} s")


def test_obstacle_stalls_the_tracks_and_the_stall_failsafe_stops_them(rig):
    r = rig()
    fwd = BaseVelocity(0.6, 0.0)                        # duty 0.6: blocked it draws 3.6 A, under the 4 A limit
    r.tick(25, "robot_msg", fwd)
    assert until(lambda: (fb := r.hw.read_motor()) is not None and fb.left_cps > 0.5 * 4000)
    r.tick(2, "robot_msg", fwd)                         # moving: whatever the lagging feedback started is reset
    r.sim.obstacle()
    assert until(lambda: (fb := r.hw.read_motor()) is not None and fb.left_cps == 0 and fb.right_cps == 0)
    ticks, snap = stream_until_halt(r, "robot_msg", fwd, 4.0)
    assert ticks * DT == pytest.approx(2.0, abs=2.5 * DT)     # stall.for_s 2 s
    (halt,) = snap.safety.halts
    assert halt.kind == "stall" and "track at duty +0.60 moved 0.00 m/s (under 0.08 m/s) for 2.0 s" in halt.reason
    r.tick()
    assert r.duty == (0.0, 0.0)
    snap = r.tick()                                     # nothing pushes now: the condition is gone,
    assert snap.safety.halts[0].cleared and r.duty == (0.0, 0.0)   # the latch waits for a fresh command
    r.sim.obstacle(False)
    r.tick(30)
    assert r.duty == (0.0, 0.0)
    r.loop.submit("robot_msg", BaseVelocity(0.0, 0.0))
    snap = r.tick(30, "robot_msg", fwd)
    assert snap.safety.halts == () and r.duty[0] == pytest.approx(0.6, abs=1e-3)


def test_obstacle_at_high_duty_trips_on_motor_current(rig):
    r = rig()
    fwd = BaseVelocity(0.9, 0.0)                        # blocked at duty 0.9: 5.4 A per track, over 4 A
    r.tick(30, "artex", fwd)
    assert until(lambda: (fb := r.hw.read_motor()) is not None and fb.left_cps > 0.5 * 4000)
    r.tick(2, "artex", fwd)
    r.sim.obstacle()
    assert until(lambda: (fb := r.hw.read_motor()) is not None and (fb.left_a or 0) > 4.0)
    ticks, snap = stream_until_halt(r, "artex", fwd, 2.0)
    assert ticks * DT == pytest.approx(0.5, abs=2.5 * DT)     # stall.current_for_s 0.5 s
    assert "motor 5.4 A over 4.0 A for 0.5" in snap.safety.halts[0].reason
    r.tick()
    assert r.duty == (0.0, 0.0)


def test_failsafes_off_without_their_devices_warn_once(rig, caplog):
    import logging
    with caplog.at_level(logging.WARNING):
        r = rig(drivers={"power": None, "imu": None})
        r.sim.tilt(roll_deg=80)
        r.tick(60, "artex", BaseVelocity(0.3, 0.0))
    assert r.loop.snapshot().safety.halts == () and r.duty[0] > 0.2
    texts = [rec.getMessage() for rec in caplog.records]
    assert texts.count("failsafe.battery is off: no power monitor configured (drivers.power)") == 1
    assert texts.count("failsafe.tilt is off: no IMU configured (drivers.imu)") == 1


# ---------------------------------------------------------------------------- a running agent, real peers


async def test_running_agent_tilt_trip_shows_on_artex_telem_and_status_and_holds_against_the_stream():
    from agent.ops.status import gather
    from agent.testing.artex_hub import ArtexHub, agent_on, driving
    from tests.conftest import wait_for
    hub = ArtexHub(ready_delay_s=0.05)
    await hub.start()
    try:
        async with agent_on(hub) as agent:
            async with driving(hub, {"com": "forward"}):
                assert await wait_for(lambda: agent.physics.duty[0] > 0.2, 5)
                agent.sim.tilt(pitch_deg=-55.0)                     # nose up, past 40 deg
                assert await wait_for(lambda: agent.control.snapshot().safety.halts, 5)
                assert await wait_for(lambda: agent.physics.duty == [0.0, 0.0], 2)
                halt = agent.control.snapshot().safety.halts[0]
                assert halt.kind == "tilt" and halt.reason.startswith("pitch -5")
                assert await wait_for(lambda: any(h["kind"] == "tilt" for h in hub.telem[-1][1].get("halts", [])), 5)
                assert "tilt failsafe set by robot" in gather(agent)["summary"]
                artex = agent.adapters["artex"]
                refused = artex.status().get("rejected", 0)                # the hub streams on: refused, nothing moves
                assert await wait_for(lambda: artex.status().get("rejected", 0) >= refused + 5, 5)
                assert agent.physics.duty == [0.0, 0.0]
                agent.sim.tilt()
                assert await wait_for(lambda: agent.control.snapshot().safety.halts[0].cleared, 5)
            assert agent.physics.duty == [0.0, 0.0]                 # cleared: still no motion without a command
            # it streamed into the latch: an explicit zero re-engages it, the next command ends the latch
            await hub.command({"drive": {"vx": 0.0, "omega": 0.0}})
            await hub.command({"com": "forward"})
            assert await wait_for(lambda: not agent.control.snapshot().safety.halts, 3)
            assert await wait_for(lambda: agent.physics.duty[0] > 0.0, 3)
    finally:
        await hub.stop()


# ---------------------------------------------------------------------------- after a long still period

#: 30 s of the loop's time standing with nothing commanded: the tick reuses what does not change
#: then (docs/architecture.md "A still tick touches little": the quiet stall verdict, the battery
#: mean, settled joints, health reports); each failsafe must still trip on the first change after.
STILL_TICKS = 1500


def stand_still(r: Rig) -> None:
    snap = r.tick(STILL_TICKS)
    assert snap.watchdog == "idle" and snap.active_source == "" and r.duty == (0.0, 0.0)


def test_stall_trips_after_a_long_still_period_and_again_after_another(rig):
    r = rig()
    fwd = BaseVelocity(0.6, 0.0)
    stand_still(r)
    r.tick(25, "robot_msg", fwd)
    assert until(lambda: (fb := r.hw.read_motor()) is not None and fb.left_cps > 0.5 * 4000)
    r.tick(2, "robot_msg", fwd)
    r.sim.obstacle()
    assert until(lambda: (fb := r.hw.read_motor()) is not None and fb.left_cps == 0 and fb.right_cps == 0)
    ticks, snap = stream_until_halt(r, "robot_msg", fwd, 4.0)
    assert ticks * DT == pytest.approx(2.0, abs=2.5 * DT) and snap.safety.halts[0].kind == "stall"
    snap = r.tick(2)                                    # nothing pushes: cleared, latched until a command
    assert snap.safety.halts[0].cleared and r.duty == (0.0, 0.0)
    stand_still(r)                                      # still again, the obstacle still there
    r.loop.submit("robot_msg", BaseVelocity(0.0, 0.0))  # re-engage, then push into it once more
    ticks, snap = stream_until_halt(r, "robot_msg", fwd, 4.0)
    # from rest the ramp (max_accel 2 m/s^2) takes 0.15 s to push over the 0.3 duty, then for_s 2 s
    assert ticks * DT == pytest.approx(2.15, abs=2.5 * DT)
    assert [h.kind for h in snap.safety.halts] == ["stall"] and not snap.safety.halts[0].cleared
    r.tick()
    assert r.duty == (0.0, 0.0)


def test_battery_critical_trips_after_a_long_still_period_at_one_voltage(rig):
    r = rig()
    stand_still(r)                                      # the same voltage sample after sample
    before = r.loop.snapshot().power
    r.sim.drain_battery(3.38)                           # 10.14 V: under critical 10.35
    assert until(lambda: volts(r) < 10.3)
    for k in range(int(3.0 / DT)):                      # critical_for_s 1 s + averaging 1 s
        snap = r.tick()
        if snap.safety.halts:
            break
    else:
        raise AssertionError(f"battery failsafe never tripped (before the drain: {before})")
    assert snap.safety.halts[0].kind == "battery" and "below critical 10.35 V" in snap.safety.halts[0].reason
    assert k * DT < 2.5


def test_tilt_trips_after_a_long_still_period(rig):
    r = rig()
    stand_still(r)
    r.sim.tilt(pitch_deg=50.0)
    assert until(lambda: r.hw.latest_imu() is not None and r.hw.latest_imu().accel_mps2[0] < -7.0)
    for k in range(100):
        snap = r.tick()
        if snap.safety.halts:
            break
    else:
        raise AssertionError("tilt failsafe never tripped")
    assert snap.safety.halts[0].kind == "tilt" and (k + 1) * DT == pytest.approx(0.3, abs=2.5 * DT)
