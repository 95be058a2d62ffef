"""RobotState's fast encoder (agent/adapters/robotmsg_encode.py): the same bytes as robot_msg.encode of the
full RobotState, read back by the library's own decoder, and the same refusals."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time

import pytest
import robot_msg as rm
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.adapters.robotmsg_encode import StateEncoder
from agent.adapters.robotmsg_state import robot_state
from agent.model import DeviceHealth, Halt, JointState, Odometry, SafetyState, TrackState
from tests.adapters.test_robotmsg import controlled, rm_config
from tests.adapters.test_robotmsg_state import DESC, FRAMES, snapshot

CLOCK = "linux-boot:test"


def library(snap, seq: int, send: float) -> bytes:
    return rm.encode(robot_state(snap, DESC, sequence=seq, clock_id=CLOCK, frames=FRAMES, send_unix_s=send))


LAYOUTS = {
    "full": snapshot(),
    "no imu, no power": snapshot(imu=None, power=None),
    "no tick yet": snapshot(t_mono_s=0.0),
    "no joint rates": snapshot(joints=JointState(names=DESC.joint_names, q=(0.1, 0.2))),
    "no joints": snapshot(joints=JointState()),
    "devices and halts": snapshot(
        devices=(DeviceHealth("motor", "ok"), DeviceHealth("imu", "degraded", "i2c"), DeviceHealth("cam", "lost")),
        safety=SafetyState(speed_cap_mps=0.5, speed_cap_reason="battery low",
                           halts=(Halt("estop", "button", "console", 1.7e9),
                                  Halt("battery", "low", "robot", 1.7e9 + 2, cleared=True)))),
}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_bytes_equal_the_librarys_full_encode_first_and_later(name):
    enc = StateEncoder(DESC, CLOCK, FRAMES)
    snap = LAYOUTS[name]
    first = enc.encode(snap, sequence=3, send_unix_s=1.7e9 + 1)
    assert first == library(snap, 3, 1.7e9 + 1) and enc.checked == 1 and enc.fast == 0
    moved = dataclasses.replace(snap, t_mono_s=snap.t_mono_s and snap.t_mono_s + 0.02, seq=snap.seq + 1,
                                odom=dataclasses.replace(snap.odom, x_m=snap.odom.x_m + 0.25))
    later = enc.encode(moved, sequence=4, send_unix_s=1.7e9 + 1.02)
    assert enc.fast == 1 and enc.trusted            # the second state of a layout went the fast way
    assert later == library(moved, 4, 1.7e9 + 1.02)
    state = rm.decode(later)
    assert state == robot_state(moved, DESC, sequence=4, clock_id=CLOCK, frames=FRAMES, send_unix_s=1.7e9 + 1.02)
    assert {a.name: a.data for a in state.metadata.aux}["odom_position"] == [snap.odom.x_m + 0.25, snap.odom.y_m]


@settings(max_examples=60, deadline=None)
@given(q=st.lists(st.floats(-3.0, 3.0), min_size=2, max_size=2), x=st.floats(-1e6, 1e6),
       counts=st.integers(-2**31, 2**31), seq=st.integers(0, 2**63 - 1), send=st.floats(0.0, 4e9))
def test_any_finite_state_of_a_known_layout_matches(q, x, counts, seq, send):
    enc = StateEncoder(DESC, CLOCK, FRAMES)
    enc.encode(snapshot(), sequence=0, send_unix_s=1.0)      # the layout is checked once
    snap = snapshot(joints=JointState(names=DESC.joint_names, q=tuple(q), qd=(0.0, 0.0), target=(0.2, -0.2)),
                    odom=Odometry(x_m=x, y_m=-0.25, yaw_rad=0.3, vx_mps=0.4, omega_radps=-0.1, distance_m=7.0),
                    tracks=TrackState(left_counts=counts, right_counts=-counts))
    assert enc.encode(snap, sequence=seq, send_unix_s=send) == library(snap, seq, send) and enc.fast == 1


def test_a_non_finite_value_goes_the_librarys_way():
    enc = StateEncoder(DESC, CLOCK, FRAMES)
    enc.encode(snapshot(), sequence=0, send_unix_s=1.0)
    bad = snapshot(power=dataclasses.replace(snapshot().power, voltage_v=math.inf))
    data = enc.encode(bad, sequence=1, send_unix_s=1.0)
    assert data == library(bad, 1, 1.0) and enc.fast == 0
    aux = {a.name: a.data for a in rm.decode(data).metadata.aux}
    assert "battery_voltage" not in aux and aux["nonfinite_dropped"] == [1.0]
    nan_q = snapshot(joints=JointState(names=DESC.joint_names, q=(math.nan, 0.0), qd=(0.0, 0.0)))
    with pytest.raises(rm.RobotMsgError):           # the library refuses a NaN joint: so does the encoder
        enc.encode(nan_q, sequence=2, send_unix_s=1.0)


def test_a_layout_the_library_refuses_is_refused_every_time():
    enc = StateEncoder(DESC, CLOCK, FRAMES)
    twins = snapshot(devices=(DeviceHealth("motor", "ok"), DeviceHealth("motor", "lost")))  # duplicate aux names
    for seq in range(2):
        with pytest.raises(rm.RobotMsgError):
            enc.encode(twins, sequence=seq, send_unix_s=1.0)
    many = snapshot(devices=tuple(DeviceHealth(f"dev{i}", "ok") for i in range(70)))  # over 64 aux arrays
    with pytest.raises(rm.RobotMsgError):
        enc.encode(many, sequence=2, send_unix_s=1.0)
    assert enc.fast == 0 and enc.trusted


async def test_published_states_are_the_librarys_own_bytes():
    """A real subscriber's RobotStates: decoded by robot_msg and encoded again, the same bytes; the
    adapter used the fast path."""
    async with controlled(rm_config()) as (agent, peer):
        sub = await peer.subscriber()
        got = []
        deadline = time.monotonic() + 10.0
        while len(got) < 10 and time.monotonic() < deadline:
            data = await asyncio.wait_for(sub.recv(), 5)
            if "imu_gyro" in {a.name for a in rm.decode(data).metadata.aux}:
                got.append(data)
        assert len(got) == 10
        for data in got:
            assert rm.encode(rm.decode(data)) == data
        encoder = agent.adapters["robot_msg"]._encoder
        assert encoder.trusted and encoder.fast > 0 and peer.status()["state_errors"] == 0


async def test_states_stay_the_librarys_bytes_with_their_values_in_place_as_devices_and_halts_come_and_go():
    """A real subscriber while the layout changes at run time: the IMU and power monitor lost on the
    emulated I2C bus and back, the e-stop set and released. Every state is the library's own bytes and
    its values sit in their places (gravity in imu_accel, the battery's volts, the e-stop's setter and
    time); each layout was checked once against the library, the later states of a layout went the fast way."""
    async with controlled(rm_config()) as (agent, peer):
        sub = await peer.subscriber()
        encoder = agent.adapters["robot_msg"]._encoder
        bus = agent.sim.i2c_bus()
        i2c = (agent.cfg.drivers.imu.address, agent.cfg.drivers.power.address)
        got: list[bytes] = []

        async def until(want) -> None:
            """Read states until one's aux names satisfy ``want``, then three more."""
            deadline = time.monotonic() + 15.0
            while time.monotonic() < deadline:
                got.append(await asyncio.wait_for(sub.recv(), 5))
                if want({a.name for a in rm.decode(got[-1]).metadata.aux}):
                    for _ in range(3):
                        got.append(await asyncio.wait_for(sub.recv(), 5))
                    return
            raise AssertionError("no such state within 15 s")

        await until(lambda n: {"imu_gyro", "battery_voltage"} <= n and "halt.estop.since" not in n)
        for addr in i2c:
            bus.remove(addr)
        await until(lambda n: not n & {"imu_gyro", "battery_voltage"})
        t_estop = time.time()
        assert agent.control.estop("console", "test")
        await until(lambda n: "halt.estop.since" in n and not n & {"imu_gyro", "battery_voltage"})
        for addr in i2c:
            bus.restore(addr, power_cycle=True)
        await until(lambda n: {"imu_gyro", "battery_voltage", "halt.estop.since"} <= n)
        agent.control.release_estop("console")
        await until(lambda n: {"imu_gyro", "battery_voltage"} <= n and "halt.estop.since" not in n)

        layouts, lost_imu = set(), 0
        for data in got:
            assert rm.encode(rm.decode(data)) == data
            aux = {a.name: a.data for a in rm.decode(data).metadata.aux}
            layouts.add(tuple(aux))
            if "imu_accel" in aux:
                assert 9.0 < aux["imu_accel"][2] < 10.5
            else:
                lost_imu += aux["health.imu"] == [2.0]
            if "battery_voltage" in aux:
                assert 9.0 < aux["battery_voltage"][0] < 13.0
            estop = "halt.estop.since" in aux
            assert aux["estop"] == aux["halted"] == [1.0 if estop else 0.0]
            if estop:
                assert aux["halt.estop.by"] == [1.0] and aux["halt.estop.cleared"] == [0.0]
                assert abs(aux["halt.estop.since"][0] - t_estop) < 5.0
        assert len(layouts) >= 4 and lost_imu, layouts
        assert encoder.trusted and encoder.checked >= len(layouts) and encoder.fast > 0
        assert peer.status()["state_errors"] == 0


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_a_repeated_tick_changes_only_the_send_time_and_sequence(name):
    """A state between two ticks (state_hz above the tick rate, a resting control loop) repeats the last
    tick's snapshot: its bytes are the library's with the new send time and sequence."""
    enc = StateEncoder(DESC, CLOCK, FRAMES)
    snap = LAYOUTS[name]
    enc.encode(snap, sequence=0, send_unix_s=1.7e9)
    for seq in (1, 2, 3):
        send = 1.7e9 + 0.02 * seq
        assert enc.encode(snap, sequence=seq, send_unix_s=send) == library(snap, seq, send)
    other = dataclasses.replace(snap, seq=snap.seq + 1, odom=dataclasses.replace(snap.odom, x_m=snap.odom.x_m + 1.0))
    assert enc.encode(other, sequence=4, send_unix_s=1.7e9 + 0.1) == library(other, 4, 1.7e9 + 0.1)
    assert enc.encode(snap, sequence=5, send_unix_s=1.7e9 + 0.12) == library(snap, 5, 1.7e9 + 0.12)
    assert enc.fast == 5
