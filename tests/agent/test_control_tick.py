"""The pure control tick (agent/control/tick.py): state + commands + time -> duty; readings -> snapshot.

No devices, no threads, no clock: every time and reading is an argument, and the
figures are worked by hand from the simulated tank's config (track 0.30 m, full
duty at 1.0 m/s, 2 m/s^2 ramp, 4000 counts/m, 50 Hz, 0.5 s source timeout).
"""

from __future__ import annotations

import pytest

from agent.control.arbitration import BASE
from agent.config import AgentConfig
from agent.control.state import ControlState
from agent.control.tick import Readings, command, motor_answered, observe
from agent.commands import BaseVelocity, TrackDuty
from agent.model import DeviceHealth
from drivers.base import MotorFeedback
from tests.conftest import sim_config

DT = 0.02


@pytest.fixture
def state() -> ControlState:
    return ControlState(AgentConfig.model_validate(sim_config()))


def run(state: ControlState, now: float, readings: Readings | None = None):
    """One whole tick as the loop runs it, with the duty write confirmed."""
    plan = command(state, now)
    motor_answered(state, True, now)
    return plan, observe(state, plan, readings or Readings())


def test_ramp_then_zero_at_the_deadline_and_not_before(state):
    state.arbiter.offer("artex", BASE, BaseVelocity(0.5, 0.0), 0.001)     # deadline 0.501 s
    duties = [command(state, k * DT).duty for k in range(1, 26)]          # t = 0.02 .. 0.50
    assert duties[0] == pytest.approx((0.04, 0.04))                       # 2 m/s^2 * 20 ms
    assert duties[-1] == pytest.approx((0.5, 0.5)) and min(d[0] for d in duties) > 0.0
    plan = command(state, 0.52)
    assert plan.duty == (0.0, 0.0) and plan.watchdog == "expired" and plan.base.winner is None


def test_first_tick_uses_one_period_and_later_ticks_the_elapsed_time(state):
    state.arbiter.offer("artex", BASE, TrackDuty(1.0, -1.0), 4.99)
    assert command(state, 5.0).dt == pytest.approx(DT)
    plan = command(state, 5.05)
    assert plan.dt == pytest.approx(0.05)
    assert plan.duty == pytest.approx((0.14, -0.14))                      # 0.04 + 2 m/s^2 * 50 ms


def test_failed_duty_write_zeroes_and_drops_base_until_a_new_command(state):
    state.arbiter.offer("sim2bot", BASE, BaseVelocity(0.3, 0.0), 0.0)
    command(state, DT)
    motor_answered(state, False, DT)
    assert state.cmd == (0.0, 0.0)
    plan = command(state, 2 * DT)                                        # the claim was still fresh
    assert plan.duty == (0.0, 0.0) and plan.base.winner is None
    motor_answered(state, True, 2 * DT)
    assert command(state, 3 * DT).duty == (0.0, 0.0)                      # the old command stays dropped
    state.arbiter.offer("sim2bot", BASE, BaseVelocity(0.3, 0.0), 3 * DT)
    assert command(state, 4 * DT).duty == pytest.approx((0.04, 0.04))


def test_runtime_limits_scale_the_target_preserving_curvature(state):
    state.max_speed_mps, state.max_accel_mps2 = 0.5, 100.0
    state.arbiter.offer("artex", BASE, BaseVelocity(1.0, 2.0), 0.0)       # (0.7, 1.3) -> x 0.5 / 1.3
    assert command(state, DT).duty == pytest.approx((0.7 * 0.5 / 1.3, 0.5))


def test_snapshot_from_encoder_feedback_and_readings(state):
    health = (DeviceHealth("motor", "degraded", "timeout", 1),)
    state.arbiter.offer("artex", BASE, BaseVelocity(0.2, 0.0), 0.0)
    _, first = run(state, DT, Readings(MotorFeedback(left_counts=100, right_counts=100), t_unix_s=7.0))
    assert first.seq == 1 and first.t_unix_s == 7.0 and first.active_source == "artex"
    assert first.odom.x_m == pytest.approx(0.0)                          # first counts: baseline only
    fb = MotorFeedback(left_counts=116, right_counts=116, left_cps=800.0, right_cps=800.0)
    _, snap = run(state, 2 * DT, Readings(fb, devices=health, faults=("motor: x",)))
    assert snap.seq == 2 and snap.t_mono_s == 2 * DT
    assert snap.odom.x_m == pytest.approx(16 / 4000)                      # 16 counts of travel
    assert snap.tracks.left_mps == pytest.approx(0.2)                     # 800 counts/s
    assert (snap.tracks.left_counts, snap.tracks.right_counts) == (116, 116)
    assert snap.tracks.cmd_left_mps == pytest.approx(0.08) and snap.devices == health
    assert snap.faults == ("motor: x",)


def test_without_feedback_odometry_integrates_the_commanded_speed(state):
    state.arbiter.offer("artex", BASE, BaseVelocity(0.2, 0.0), 0.0)
    run(state, DT)                                                       # commands 0.04 m/s
    _, snap = run(state, 2 * DT)                                         # integrates 0.04 over 20 ms
    assert snap.odom.x_m == pytest.approx(0.04 * DT)
    assert snap.tracks.left_mps == pytest.approx(0.04) and snap.tracks.cmd_left_mps == pytest.approx(0.08)


def test_next_deadline_is_the_driving_commands_as_of_the_last_tick(state):
    assert state.next_deadline(0.0) is None
    state.arbiter.offer("robot_msg", BASE, BaseVelocity(0.2, 0.0), 0.1)
    assert state.next_deadline(0.2) == pytest.approx(0.6)
    command(state, 0.58)
    assert state.next_deadline(0.7) == pytest.approx(0.6)                 # still due: it drove at 0.58
    command(state, 0.62)
    assert state.next_deadline(0.7) is None


def test_pulses_are_the_joints_and_gripper_at_home(state):
    plan = command(state, DT)
    assert plan.pulses == {0: 1500.0, 1: 1384.62, 2: 2000.0}
    assert plan.joints.q == (0.0, 0.0) and plan.gripper == 1.0 and plan.watchdog == "idle"
