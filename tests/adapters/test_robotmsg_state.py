"""Snapshot -> RobotState (agent/adapters/robotmsg_state.py), checked through the library's own codecs."""

from __future__ import annotations

import math

import pytest
import robot_msg as rm
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.adapters.robotmsg_state import StateFrames, monotonic_clock_id, robot_state, state_aux
from agent.model import (
    DeviceHealth, Halt,
    ImuSample, JointState, Odometry, PowerSample, RobotDescription, SafetyState, Snapshot, TrackState,
)

DESC = RobotDescription(
    name="tank", kind="Robot", joint_names=("turret_pan", "camera_tilt"),
    joint_limits=((-1.57, 1.57), (-0.5, 0.8)), home=(0.0, 0.0), has_gripper=True,
    track_width_m=0.3, max_speed_mps=1.0, max_omega_radps=6.6, cameras=("front",),
)
FRAMES = StateFrames("base_link", "odom", "imu_world")


def snapshot(**kw) -> Snapshot:
    base = dict(
        seq=42, t_mono_s=1000.5, t_unix_s=1.7e9,
        odom=Odometry(x_m=1.5, y_m=-0.25, yaw_rad=0.3, vx_mps=0.4, omega_radps=-0.1, distance_m=7.0),
        tracks=TrackState(cmd_left_mps=0.45, cmd_right_mps=0.35, duty_left=0.45, duty_right=0.35,
                          left_mps=0.44, right_mps=0.36, left_counts=1200, right_counts=-80),
        joints=JointState(names=DESC.joint_names, q=(0.1, -0.2), target=(0.2, -0.2), qd=(0.5, 0.0),
                          qdd=(0.0, 0.0), qddd=(0.0, 0.0)),
        gripper=0.75,
        imu=ImuSample(t_mono_s=1000.49, accel_mps2=(0.1, 0.0, 9.81), gyro_radps=(0.0, 0.0, -0.1),
                      orientation_xyzw=(0.0, 0.0, 0.149, 0.989), temperature_c=31.0),
        power=PowerSample(t_mono_s=1000.4, voltage_v=11.9, current_a=1.2, power_w=14.28, percent=80.0),
    )
    base.update(kw)
    return Snapshot(**base)


def aux_by_name(state: rm.RobotState) -> dict[str, rm.NamedArray]:
    return {a.name: a for a in state.metadata.aux}


def build(snap: Snapshot, seq: int = 7) -> rm.RobotState:
    return robot_state(snap, DESC, sequence=seq, clock_id="linux-boot:test", frames=FRAMES, send_unix_s=1.7e9 + 1)


@pytest.mark.parametrize("codec", [(rm.encode, rm.decode), (rm.encode_json, rm.decode_json)], ids=["binary", "json"])
def test_state_round_trips_through_the_library(codec):
    encode, decode = codec
    state = build(snapshot())
    out = decode(encode(state))
    assert out == state
    assert out.q == [0.1, -0.2] and out.dq == [0.5, 0.0] and out.tau_ext == [0.0, 0.0]
    assert out.frame_id == "base_link" and out.sequence == 7
    assert out.joint_frames == [] and out.ee_frames == []
    assert out.base_wrench_ext == rm.Wrench(rm.Vec3(0.0, 0.0, 0.0), rm.Vec3(0.0, 0.0, 0.0))


def test_times_are_the_ticks_monotonic_time_and_the_send_time():
    meta = build(snapshot()).metadata
    assert meta.sample_time == rm.Timestamp(1000.5, "monotonic", "linux-boot:test")
    assert meta.send_time == rm.Timestamp(1.7e9 + 1, "unix")
    assert meta.receive_time is None


def test_no_tick_yet_means_no_sample_time():
    state = build(Snapshot())
    rm.validate(state)
    assert state.metadata.sample_time is None and state.metadata.send_time is not None
    assert state.q == [] and state.dq == []


def test_aux_arrays_carry_values_units_and_frames():
    aux = aux_by_name(build(snapshot()))
    expect = {
        "odom_position": ([1.5, -0.25], [2], "m", "odom"),
        "odom_yaw": ([0.3], [], "rad", "odom"),
        "odom_vx": ([0.4], [], "m/s", "base_link"),
        "odom_omega": ([-0.1], [], "rad/s", "base_link"),
        "odom_distance": ([7.0], [], "m", None),
        "track_speed": ([0.44, 0.36], [2], "m/s", "base_link"),
        "track_speed_cmd": ([0.45, 0.35], [2], "m/s", "base_link"),
        "track_duty": ([0.45, 0.35], [2], "1", None),
        "track_counts": ([1200.0, -80.0], [2], "count", None),
        "joint_target": ([0.2, -0.2], [2], "rad", None),
        "gripper": ([0.75], [], "1", None),
        "imu_accel": ([0.1, 0.0, 9.81], [3], "m/s^2", "base_link"),
        "imu_gyro": ([0.0, 0.0, -0.1], [3], "rad/s", "base_link"),
        "imu_orientation": ([0.0, 0.0, 0.149, 0.989], [4], "1", "imu_world"),
        "imu_temperature": ([31.0], [], "degC", None),
        "battery_voltage": ([11.9], [], "V", None),
        "battery_current": ([1.2], [], "A", None),
        "battery_power": ([14.28], [], "W", None),
        "battery_percent": ([80.0], [], "%", None),
        "stopped": ([0.0], [], "1", None),
        "watchdog_expired": ([0.0], [], "1", None),
        "fault_count": ([0.0], [], "1", None),
        "estop": ([0.0], [], "1", None),
        "halted": ([0.0], [], "1", None),
    }
    for name, (data, shape, unit, frame) in expect.items():
        a = aux[name]
        assert (a.data, a.shape, a.unit, a.frame_id) == (data, shape, unit, frame), name
    assert math.isclose(aux["imu_age"].data[0], 0.01, abs_tol=1e-9) and aux["imu_age"].unit == "s"
    assert math.isclose(aux["battery_age"].data[0], 0.1, abs_tol=1e-9)
    assert set(aux) == set(expect) | {"imu_age", "battery_age"}


def test_unknown_devices_leave_their_arrays_out():
    aux = aux_by_name(build(snapshot(imu=None, power=None, gripper=None)))
    assert not any(n.startswith(("imu_", "battery_")) for n in aux) and "gripper" not in aux
    imu = ImuSample(t_mono_s=1.0, accel_mps2=(0.0, 0.0, 9.8), gyro_radps=(0.0, 0.0, 0.0))
    aux = aux_by_name(build(snapshot(imu=imu, power=PowerSample(1.0, 12.0, 0.5, 6.0))))
    assert "imu_gyro" in aux and "imu_orientation" not in aux and "imu_temperature" not in aux
    assert "battery_voltage" in aux and "battery_percent" not in aux


def test_halts_and_speed_cap_are_aux_arrays():
    safety = SafetyState((Halt("estop", "STOP pressed", "console", 1.7e9),
                          Halt("tilt", "roll 40 deg", "robot", 1.7e9 + 5, cleared=True)), 0.3, "battery low")
    state = build(snapshot(safety=safety))
    rm.validate(state)
    aux = aux_by_name(state)
    assert aux["estop"].data == [1.0] and aux["halted"].data == [1.0]
    assert aux["halt.estop.since"].data == [1.7e9] and aux["halt.estop.since"].unit == "s"
    assert aux["halt.estop.by"].data == [1.0] and aux["halt.estop.cleared"].data == [0.0]
    assert aux["halt.tilt.by"].data == [0.0] and aux["halt.tilt.cleared"].data == [1.0]
    assert aux["speed_cap"].data == [0.3] and aux["speed_cap"].unit == "m/s"
    assert not any(n.startswith("halt.") for n in aux_by_name(build(snapshot())))


def test_status_flags_follow_the_snapshot():
    aux = aux_by_name(build(snapshot(stopped=True, watchdog="expired", faults=("motor: lost", "imu: lost"))))
    assert aux["stopped"].data == [1.0] and aux["watchdog_expired"].data == [1.0]
    assert aux["fault_count"].data == [2.0]


def test_device_health_is_one_aux_per_device():
    devices = (DeviceHealth("motor", "lost", "gone", 3), DeviceHealth("imu", "degraded", "121", 1),
               DeviceHealth("power", "ok"))
    aux = aux_by_name(build(snapshot(devices=devices)))
    assert [aux[f"health.{n}"].data for n in ("motor", "imu", "power")] == [[2.0], [1.0], [0.0]]


def test_dq_falls_back_to_zero_when_the_tick_has_no_rates():
    state = build(snapshot(joints=JointState(names=DESC.joint_names, q=(0.1, 0.2))))
    assert state.dq == [0.0, 0.0] and state.tau_ext == [0.0, 0.0]


@settings(max_examples=50, deadline=None)
@given(q=st.lists(st.floats(-3.0, 3.0), max_size=8), x=st.floats(-1e6, 1e6), seq=st.integers(0, 2**62))
def test_any_finite_snapshot_encodes(q, x, seq):
    snap = snapshot(joints=JointState(q=tuple(q), qd=tuple(0.0 for _ in q)), odom=Odometry(x_m=x))
    state = robot_state(snap, DESC, sequence=seq, clock_id="c", frames=FRAMES, send_unix_s=1.0)
    assert rm.decode(rm.encode(state)) == state


def test_clock_id_names_the_boot(tmp_path):
    boot = tmp_path / "boot_id"
    boot.write_text("AB6F36A9-9a1b-487b-badc-5a0b5f051df0\n")
    assert monotonic_clock_id(str(boot)) == "linux-boot:ab6f36a9-9a1b-487b-badc-5a0b5f051df0"
    missing = str(tmp_path / "none")
    fallback = monotonic_clock_id(missing)
    assert fallback.startswith("process-") and len(fallback) <= 128
    rm.validate(rm.ControllerCommand(metadata=rm.MessageMetadata(
        sample_time=rm.Timestamp(1.0, "monotonic", fallback))))


def test_state_aux_respects_the_librarys_limits():
    aux = state_aux(snapshot(), FRAMES)
    assert len(aux) <= 64 and len({a.name for a in aux}) == len(aux)
