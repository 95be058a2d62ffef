"""Skid-steer kinematics and odometry (agent/control/kinematics.py), worked numbers."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.control.kinematics import (
    Odometer,
    integrate,
    limited_tracks,
    ramp,
    scale_to_limit,
    tracks_to_duty,
    tracks_to_twist,
    twist_to_tracks,
    wrap_angle,
)
from agent.errors import CommandRejected
from agent.commands import BaseVelocity, Reach
from agent.model import Odometry

W = 0.30


def test_twist_to_tracks_worked_example():
    # v_l = 0.5 - 1.0*0.3/2 = 0.35, v_r = 0.5 + 0.15 = 0.65
    assert twist_to_tracks(0.5, 1.0, W) == pytest.approx((0.35, 0.65))
    # spin in place, + omega = left turn: left track back, right forward
    assert twist_to_tracks(0.0, 2.0, W) == pytest.approx((-0.3, 0.3))


def test_scale_to_limit_preserves_curvature():
    # vx 1.0, omega 2.0 -> (0.7, 1.3); limit 1.0 -> factor 1/1.3
    left, right = scale_to_limit(*twist_to_tracks(1.0, 2.0, W), 1.0)
    assert (left, right) == pytest.approx((0.7 / 1.3, 1.0))
    vx, omega = tracks_to_twist(left, right, W)
    assert vx / omega == pytest.approx(1.0 / 2.0)  # radius unchanged: 0.5 m
    assert scale_to_limit(0.4, -0.2, 1.0) == (0.4, -0.2)
    assert scale_to_limit(-2.0, 1.0, 0.5) == pytest.approx((-0.5, 0.25))


def test_ramp_moves_both_tracks_by_the_same_fraction():
    # accel 2 m/s^2 at 50 Hz -> 0.04 m/s per tick; the larger change (1.0) sets the fraction
    assert ramp((0.0, 0.0), (1.0, 0.5), 0.04) == pytest.approx((0.04, 0.02))
    assert ramp((0.98, 0.49), (1.0, 0.5), 0.04) == (1.0, 0.5)
    assert ramp((0.5, 0.5), (-0.5, 0.5), 0.1) == pytest.approx((0.4, 0.5))


def test_ramp_reaches_target_after_expected_ticks():
    cur = (0.0, 0.0)
    ticks = 0
    while cur != (1.0, 1.0):
        cur = ramp(cur, (1.0, 1.0), 2.0 * 0.02)
        ticks += 1
    assert ticks == 25  # 1 m/s at 2 m/s^2 = 0.5 s = 25 ticks of 20 ms


def test_tracks_to_duty_divides_and_clamps():
    assert tracks_to_duty(0.35, -0.65, 1.0) == pytest.approx((0.35, -0.65))
    assert tracks_to_duty(0.5, 1.0, 2.0) == pytest.approx((0.25, 0.5))
    assert tracks_to_duty(3.0, -3.0, 1.0) == (1.0, -1.0)


def test_tracks_to_duty_never_turns_nan_into_a_duty():
    # NaN never gets here (the edge, agent.model, refuses it); were one to, the one clamp must not make
    # it a number (min(1.0, nan) is 1.0: full duty) but pass it on to the driver's device guard,
    # which refuses it with nothing sent (tests/drivers: test_non_finite_input_is_rejected...)
    for left, right in ((math.nan, 0.5), (-0.5, math.nan), (math.nan, math.nan), (3.0, math.nan)):
        duty = tracks_to_duty(left, right, 1.0)
        # the NaN side stays NaN: never full duty (the min/max trap), never a made-up zero
        assert math.isnan(duty[0] if math.isnan(left) else duty[1]), duty
    assert tracks_to_duty(-0.5, math.nan, 1.0)[0] == -0.5


def test_a_twist_near_the_float_maximum_is_refused_at_the_edge_and_the_largest_admitted_keeps_the_curvature():
    reach = Reach(1.0, 2.0 / W)                       # 1 m/s at full duty, W 0.3 m
    for vx, omega in ((1.7e308, 1.7e308), (-1.7e308, 1.7e308), (1e300, 0.0), (0.0, -1e300)):
        with pytest.raises(CommandRejected, match="more than 10x"):
            reach.check(BaseVelocity(vx, omega))
    top_vx, top_omega = 10 * reach.vx_mps, 10 * reach.omega_radps
    reach.check(BaseVelocity(top_vx, top_omega))      # the largest twist admitted
    assert limited_tracks(top_vx, top_vx, W, 1.0) == pytest.approx(limited_tracks(1.0, 1.0, W, 1.0))
    assert limited_tracks(top_vx, top_vx, W, 1.0) == pytest.approx((0.85 / 1.15, 1.0))
    assert limited_tracks(-top_vx, top_vx, W, 2.0) == pytest.approx((-2.0, -2.0 * 0.85 / 1.15))
    assert limited_tracks(top_vx, top_omega, W, 1.0) == pytest.approx(scale_to_limit(*twist_to_tracks(
        top_vx, top_omega, W), 1.0))
    assert limited_tracks(0.5, 1.0, W, 1.0) == pytest.approx((0.35, 0.65))


def test_wrap_angle():
    assert wrap_angle(3 * math.pi / 2) == pytest.approx(-math.pi / 2)
    assert wrap_angle(-3 * math.pi / 2) == pytest.approx(math.pi / 2)
    assert wrap_angle(0.3) == pytest.approx(0.3)


def test_integrate_straight_line():
    o = integrate(Odometry(), 0.1, 0.1, 0.1, W)
    assert (o.x_m, o.y_m, o.yaw_rad) == pytest.approx((0.1, 0.0, 0.0))
    assert (o.vx_mps, o.omega_radps, o.distance_m) == pytest.approx((1.0, 0.0, 0.1))


def test_integrate_midpoint_arc():
    # left 0.1 m, right 0.2 m: ds 0.15, dyaw 0.1/0.3 = 1/3 rad, heading used 1/6 rad
    o = integrate(Odometry(), 0.1, 0.2, 0.5, W)
    assert o.yaw_rad == pytest.approx(1 / 3)
    assert o.x_m == pytest.approx(0.15 * math.cos(1 / 6))
    assert o.y_m == pytest.approx(0.15 * math.sin(1 / 6))
    assert (o.vx_mps, o.omega_radps) == pytest.approx((0.3, 2 / 3))


def test_integrate_full_circle_returns_home():
    # a full circle of radius 0.5 m in 400 steps comes back to the start
    o = Odometry()
    r, n = 0.5, 400
    for _ in range(n):
        arc = 2 * math.pi / n
        o = integrate(o, arc * (r - W / 2), arc * (r + W / 2), 0.01, W)
    assert (o.x_m, o.y_m) == pytest.approx((0.0, 0.0), abs=1e-9)
    assert o.yaw_rad == pytest.approx(0.0, abs=1e-9)
    assert o.distance_m == pytest.approx(2 * math.pi * r)


def test_integrate_wraps_yaw():
    o = Odometry(yaw_rad=3.0)
    o = integrate(o, -0.05, 0.05, 0.1, W)  # +1/3 rad
    assert o.yaw_rad == pytest.approx(3.0 + 1 / 3 - 2 * math.pi)


def test_odometer_uses_encoder_counts():
    odo = Odometer(W, 4000.0, 1.0)
    first = odo.measure(0.02, (1000, 1000), None, (0.5, 0.5))
    assert not first.from_encoders      # baseline only: commanded speed for this interval
    r = odo.measure(0.02, (1040, 1080), (2000.0, 4000.0), (0.0, 0.0))
    assert r.from_encoders
    assert (r.left_m, r.right_m) == pytest.approx((0.01, 0.02))
    assert (r.left_mps, r.right_mps) == pytest.approx((0.5, 1.0))   # from cps / counts_per_m
    r = odo.measure(0.02, (1080, 1160), None, (0.0, 0.0))
    assert (r.left_mps, r.right_mps) == pytest.approx((0.5, 1.0))   # from counts / dt


def test_odometer_without_encoders_uses_commanded_speeds():
    odo = Odometer(W, 0.0, 1.0)
    r = odo.measure(0.1, (5, 5), None, (0.3, 0.3))
    assert not r.from_encoders
    assert (r.left_m, r.right_m, r.left_mps) == pytest.approx((0.03, 0.03, 0.3))
    o = odo.update(0.1, r)
    assert (o.x_m, o.vx_mps) == pytest.approx((0.03, 0.3))


def test_odometer_reseeds_on_impossible_jump(caplog):
    odo = Odometer(W, 4000.0, 1.0)
    odo.measure(0.02, (0, 0), None, (0.0, 0.0))
    r = odo.measure(0.02, (400_000, 400_000), None, (0.0, 0.0))  # 100 m in 20 ms: a counter reset
    assert not r.from_encoders and r.left_m == 0.0
    assert "impossible" in caplog.text
    r = odo.measure(0.02, (400_040, 400_040), None, (0.0, 0.0))
    assert r.from_encoders and r.left_m == pytest.approx(0.01)


def test_odometer_gap_sets_new_baseline():
    odo = Odometer(W, 4000.0, 1.0)
    odo.measure(0.02, (0, 0), None, (0.0, 0.0))
    odo.measure(0.02, None, None, (0.2, 0.2))          # feedback lost: commanded speeds
    r = odo.measure(0.02, (10, 10), None, (0.2, 0.2))    # back: baseline again, no jump integrated
    assert not r.from_encoders and r.left_m == pytest.approx(0.004)


@given(st.floats(-3, 3), st.floats(-20, 20), st.floats(0.1, 3))
def test_scaled_tracks_never_exceed_limit(vx, omega, limit):
    left, right = scale_to_limit(*twist_to_tracks(vx, omega, W), limit)
    assert abs(left) <= limit + 1e-12 and abs(right) <= limit + 1e-12


#: Far beyond any twist the edge admits (10x the maximum speed and yaw rate; agent.commands.Reach).
ADMITTED = st.floats(-1e6, 1e6)


@given(ADMITTED, ADMITTED, st.floats(0.02, 5.0), st.floats(0.1, 20.0))
def test_limited_tracks_are_finite_and_within_the_limit_for_any_admitted_twist(vx, omega, width, limit):
    left, right = limited_tracks(vx, omega, width, limit)
    assert math.isfinite(left) and math.isfinite(right)
    assert abs(left) <= limit * (1 + 1e-9) and abs(right) <= limit * (1 + 1e-9)


def test_odometer_bounds_a_jump_by_the_time_between_timed_reads(caplog):
    """Two ticks 20 ms apart may see counts read 0.5 s apart (the motor thread reads on its own
    schedule; a loaded machine holds one up): 0.2 m then is travel, not a jump; 100 m is still one."""
    odo = Odometer(W, 4000.0, 1.0)
    odo.measure(0.02, (0, 0), None, (0.3, 0.3), (10.00, 10.01))
    r = odo.measure(0.02, (800, 800), None, (0.3, 0.3), (10.50, 10.51))     # 0.2 m in 0.5 s of reads
    assert r.from_encoders and (r.left_m, r.right_m) == pytest.approx((0.2, 0.2))
    assert (r.left_mps, r.right_mps) == pytest.approx((0.4, 0.4))            # over the reads' 0.5 s
    assert "impossible" not in caplog.text
    r = odo.measure(0.02, (400_800, 400_800), None, (0.3, 0.3), (10.55, 10.56))   # 100 m in 60 ms of reads
    assert not r.from_encoders and r.left_m == pytest.approx(0.006)
    assert "impossible" in caplog.text
    r = odo.measure(0.02, (400_840, 400_840), None, (0.3, 0.3), (10.60, 10.61))   # counted from the new baseline
    assert r.from_encoders and r.left_m == pytest.approx(0.01)


def test_odometer_without_read_times_bounds_by_the_ticks_time(caplog):
    """The same 0.2 m with no read times: 20 ms of ticks allow 0.09 m, so it is refused (the bound
    the control loop applied before the reads were timed)."""
    odo = Odometer(W, 4000.0, 1.0)
    odo.measure(0.02, (0, 0), None, (0.3, 0.3))
    r = odo.measure(0.02, (800, 800), None, (0.3, 0.3))
    assert not r.from_encoders and "impossible" in caplog.text
