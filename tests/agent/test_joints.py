"""Servo joints and gripper (agent/control/joints.py), worked numbers."""

from __future__ import annotations

import pytest

from agent.config.drivers import GripperConfig, ServoJointConfig
from agent.errors import CommandError, CommandRejected
from agent.control.joints import (
    HOLD,
    TARGET_MARGIN_RAD,
    POSITION,
    TRAJECTORY,
    VELOCITY,
    JointController,
    angle_to_pulse_us,
    gripper_pulse_us,
    interpolate,
)
from agent.commands import JointTrajectory, TrajectoryPoint

PAN = ServoJointConfig(name="pan", channel=0, min_us=500, max_us=2500, min_rad=-1.0, max_rad=1.0,
                       home_rad=0.0, max_speed_radps=1.0)
TILT = ServoJointConfig(name="tilt", channel=3, min_us=2000, max_us=1000, min_rad=-0.5, max_rad=0.5,
                        home_rad=0.25, max_speed_radps=2.0)
GRIP = GripperConfig(channel=5, closed_us=1000, open_us=2000, home_fraction=0.5)
DT = 0.1


@pytest.fixture
def jc() -> JointController:
    return JointController([PAN, TILT], GRIP)


def run(jc: JointController, t0: float, ticks: int, qd=None) -> float:
    t = t0
    for _ in range(ticks):
        t = round(t + DT, 9)
        jc.step(t, DT, qd, "sim2bot")
    return t


def test_pulse_maps():
    assert angle_to_pulse_us(0.5, PAN) == pytest.approx(2000.0)      # 500 + 0.75 * 2000
    assert angle_to_pulse_us(-1.0, PAN) == pytest.approx(500.0)
    assert angle_to_pulse_us(0.25, TILT) == pytest.approx(1250.0)    # reversed servo: 2000 - 0.75 * 1000
    assert angle_to_pulse_us(5.0, PAN) == pytest.approx(2500.0)      # clamped
    assert gripper_pulse_us(0.25, GRIP) == pytest.approx(1250.0)


def test_interpolate():
    pts = [(0.0, (0.0, 1.0)), (1.0, (1.0, 1.0)), (3.0, (0.0, 0.0))]
    assert interpolate(pts, -1.0) == [0.0, 1.0]
    assert interpolate(pts, 0.5) == pytest.approx([0.5, 1.0])
    assert interpolate(pts, 2.0) == pytest.approx([0.5, 0.5])
    assert interpolate(pts, 9.0) == [0.0, 0.0]


def test_starts_at_home_and_pulses_include_gripper(jc):
    assert jc.q == [0.0, 0.25] and jc.mode == HOLD
    assert jc.pulses() == {0: 1500.0, 3: 1250.0, 5: 1500.0}


def test_position_slews_at_max_speed(jc):
    jc.set_position("artex", (0.35,))          # partial: first joint only
    assert jc.mode == POSITION and jc.target == [0.35, 0.25]
    run(jc, 0.0, 1)
    assert jc.q == pytest.approx([0.1, 0.25])   # 1 rad/s * 0.1 s
    assert jc.qd == pytest.approx([1.0, 0.0])
    run(jc, 0.1, 3)
    assert jc.q == pytest.approx([0.35, 0.25])  # 0.1, 0.2, 0.3, then the last 0.05
    assert jc.qd == pytest.approx([0.5, 0.0])
    assert jc.qdd == pytest.approx([-5.0, 0.0])   # (0.5 - 1.0) / 0.1
    assert not jc.moving


def test_position_clamped_with_one_warning_per_source(jc, caplog):
    jc.set_position("artex", (2.0, -0.9))
    assert jc.target == [1.0, -0.5]
    jc.set_position("artex", (3.0,))
    jc.set_position("sim2bot", (3.0,))
    warnings = [r for r in caplog.records if "clamped" in r.getMessage()]
    assert len(warnings) == 2 and "pan=2" in warnings[0].getMessage()


@pytest.mark.parametrize("q, field", [
    ((1e300, 0.0), r"joint_position q\[0\] \(pan\) 1e\+300 rad"),
    ((0.0, -1e300), r"joint_position q\[1\] \(tilt\) -1e\+300 rad"),
    ((1.0 + TARGET_MARGIN_RAD + 1e-6,), r"q\[0\] \(pan\)"),
    ((0.0, -0.5 - TARGET_MARGIN_RAD - 1e-6), r"q\[1\] \(tilt\)"),
])
def test_a_target_more_than_a_full_turn_outside_the_limits_is_refused_not_clamped(jc, q, field):
    with pytest.raises(CommandRejected, match=field + ".*outside the joint's limits") as err:
        jc.set_position("artex", q)
    assert err.value.reason == "out_of_range"
    assert jc.target == [0.0, 0.25] and jc.mode == HOLD


def test_a_target_within_a_full_turn_of_the_limits_is_clamped(jc):
    jc.set_position("artex", (1.0 + TARGET_MARGIN_RAD, -0.5 - TARGET_MARGIN_RAD))
    assert jc.target == [1.0, -0.5]


def test_a_trajectory_with_one_absurd_point_is_refused_naming_the_point(jc):
    traj = JointTrajectory((TrajectoryPoint(0.5, (0.5, 0.0)), TrajectoryPoint(1.0, (0.5, 1e300))))
    with pytest.raises(CommandRejected, match=r"joint_trajectory points\[1\]\.q\[1\] \(tilt\)"):
        jc.check_trajectory(traj)


@pytest.mark.parametrize("q, reason", [((), "no values"), ((0.1, 0.2, 0.3), "3 values for 2 joints")])
def test_wrong_length_rejected_without_change(jc, q, reason):
    with pytest.raises(CommandError, match=reason):
        jc.set_position("artex", q)
    assert jc.target == [0.0, 0.25] and jc.mode == HOLD


def test_no_joints_no_gripper():
    bare = JointController([], None)
    with pytest.raises(CommandError, match="no servo joints"):
        bare.check_length("joint_velocity", 1)
    with pytest.raises(CommandError, match="no gripper"):
        bare.set_gripper(0.5)
    assert bare.pulses() == {}


def test_velocity_integrates_then_holds_when_stale(jc):
    t = run(jc, 0.0, 3, qd=(0.5, -1.0))
    assert jc.mode == VELOCITY
    assert jc.q == pytest.approx([0.15, -0.05])   # 0.5*0.3, 0.25 - 1.0*0.3
    t = run(jc, t, 2, qd=None)                    # stale: hold where they are
    assert jc.mode == HOLD and jc.q == pytest.approx([0.15, -0.05]) and jc.target == jc.q


def test_velocity_clamped_to_limits_and_speed(jc, caplog):
    run(jc, 0.0, 30, qd=(5.0,))                   # 5 rad/s clamped to 1 rad/s, stops at max_rad
    assert jc.q == pytest.approx([1.0, 0.25])
    assert sum("max_speed_radps" in r.getMessage() for r in caplog.records) == 1


def test_trajectory_interpolates_from_current_pose_and_holds_last_point(jc):
    traj = JointTrajectory((TrajectoryPoint(0.2, (0.2, 0.25)), TrajectoryPoint(0.6, (0.6, 0.25))))
    jc.start_trajectory("robot_msg", traj, now=0.0)
    run(jc, 0.0, 1)
    assert jc.target == pytest.approx([0.1, 0.25])   # half-way from home (0) to the first point
    run(jc, 0.1, 3)                                   # t = 0.4: between the points
    assert jc.target == pytest.approx([0.4, 0.25]) and jc.q == pytest.approx([0.4, 0.25])
    run(jc, 0.4, 5)                                   # t = 0.9: past the end
    assert jc.mode == POSITION and jc.q == pytest.approx([0.6, 0.25])


def test_trajectory_loop_wraps_from_last_point(jc):
    traj = JointTrajectory((TrajectoryPoint(0.0, (0.0,)), TrajectoryPoint(0.4, (0.4,))), loop=True)
    jc.start_trajectory("robot_msg", traj, now=0.0)
    run(jc, 0.0, 3)
    assert jc.target == pytest.approx([0.3, 0.25])
    run(jc, 0.3, 2)                                   # t = 0.5 -> 0.1 in the second cycle
    assert jc.mode == TRAJECTORY and jc.target == pytest.approx([0.1, 0.25])


def test_trajectory_too_wide_rejected(jc):
    with pytest.raises(CommandError, match="3 values for 2 joints"):
        jc.start_trajectory("artex", JointTrajectory((TrajectoryPoint(0.0, (0, 0, 0)),)), 0.0)
    assert jc.mode == HOLD


def test_hold_cancels_trajectory(jc):
    jc.start_trajectory("robot_msg", JointTrajectory((TrajectoryPoint(1.0, (1.0,)),)), 0.0)
    run(jc, 0.0, 2)
    jc.hold()
    run(jc, 0.2, 3)
    assert jc.q == pytest.approx([0.2, 0.25]) and jc.mode == HOLD


def test_go_home_and_gripper(jc):
    jc.set_position("artex", (0.5, -0.5))
    jc.set_gripper(0.0)
    run(jc, 0.0, 10)
    assert jc.pulses() == {0: 2000.0, 3: 2000.0, 5: 1000.0}
    jc.go_home("artex")
    assert jc.gripper == 0.5
    run(jc, 1.0, 10)
    assert jc.q == pytest.approx([0.0, 0.25])
    assert jc.state().names == ("pan", "tilt") and jc.state().target == (0.0, 0.25)
