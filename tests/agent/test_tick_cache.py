"""What the control tick computes once and reuses while its inputs are unchanged (agent/control/claims.py,
arbitration.py, state.py, failsafes.py, scheduler.py): every reused value must follow every change at once,
above all a stop, the e-stop, a fault and the watchdog.

Pure state on an injected clock (no devices, no threads), with the simulated tank's figures: full duty at
1.0 m/s, 2 m/s^2 ramp (0.04 m/s a 20 ms tick), 0.5 s source timeout, track 0.30 m.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.config import AgentConfig
from agent.control.arbitration import BASE, JOINTS, Arbiter
from agent.control.claims import Claims
from agent.control.failsafes import BatteryDetector, BatterySettings, StallDetector, StallSettings
from agent.control.scheduler import Bell
from agent.control.state import ControlState
from agent.control.tick import Readings, check_failsafes, command, motor_answered
from agent.commands import BaseVelocity, JointVelocity, TrackDuty
from agent.errors import CommandDeclined
from agent.model import PowerSample
from drivers.base import MotorFeedback
from tests.conftest import sim_config

DT = 0.02
FWD = BaseVelocity(0.3, 0.0)        # 0.3 m/s on both tracks: reached after 8 ticks of the ramp


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def rig() -> tuple[ControlState, Clock]:
    clock = Clock()
    return ControlState(AgentConfig.model_validate(sim_config()), clock=clock), clock


def tick(state: ControlState, clock: Clock, ok: bool = True):
    clock.t = round(clock.t + DT, 9)
    plan = command(state, clock.t)
    motor_answered(state, ok, clock.t)
    return plan


def cruise(state: ControlState, clock: Clock, source: str = "artex", cmd=FWD, ticks: int = 12):
    """Drive ``cmd`` from ``source`` (repeated every 5 ticks, as a key held) until the ramp is done."""
    plan = None
    for k in range(ticks):
        if k % 5 == 0:
            state.offer_velocity(source, cmd)
        plan = tick(state, clock)
    assert plan.duty == pytest.approx((0.3, 0.3))
    assert state.cmd is state.base_target(plan.base.velocity)      # at the target: the reused pair
    return plan


# ---------------------------------------------------------------------------- the drive path
def test_a_steady_drive_reuses_its_target_and_duty_and_a_stop_zeroes_the_next_tick(rig):
    state, clock = rig
    plan = cruise(state, clock)
    again = tick(state, clock)
    assert again.duty is plan.duty and again.cmd is plan.cmd            # computed once
    state.stop("sim2bot")                                               # a lower source's stop wins
    stopped = tick(state, clock)
    assert stopped.duty == (0.0, 0.0) and stopped.cmd == (0.0, 0.0) and stopped.base.velocity is None
    assert stopped.stopped and state.duty() == (0.0, 0.0)
    state.offer_velocity("sim2bot", FWD)                                # the stopper drives again: from rest
    assert tick(state, clock).duty == pytest.approx((0.04, 0.04))


def test_the_estop_zeroes_a_steady_drive_and_its_release_ramps_from_rest(rig):
    state, clock = rig
    cruise(state, clock)
    state.estop("console", "test", 1.0)
    plan = tick(state, clock)
    assert plan.duty == (0.0, 0.0) and plan.base.winner is None and state.cmd == (0.0, 0.0)
    with pytest.raises(CommandDeclined):
        state.offer_velocity("artex", FWD)
    assert tick(state, clock).duty == (0.0, 0.0)
    state.release_estop("console")
    state.offer_velocity("artex", BaseVelocity(0.0, 0.0))               # re-engages after the halt
    state.offer_velocity("artex", FWD)
    assert tick(state, clock).duty == pytest.approx((0.04, 0.04))


def test_a_failed_duty_write_zeroes_a_steady_drive_and_drops_its_command(rig):
    state, clock = rig
    cruise(state, clock)
    tick(state, clock, ok=False)                                        # the write failed: tracks zero at once
    assert state.cmd == (0.0, 0.0) and state.duty() == (0.0, 0.0)
    plan = tick(state, clock)                                           # base commands dropped
    assert plan.duty == (0.0, 0.0) and plan.base.winner is None


def test_the_watchdog_zeroes_a_steady_drive_at_its_deadline(rig):
    state, clock = rig
    state.offer_velocity("artex", FWD)                                  # at t = 0: deadline 0.5 s
    plans = [tick(state, clock) for _ in range(25)]                     # t = 0.02 .. 0.50
    assert plans[-2].duty == pytest.approx((0.3, 0.3)) and plans[-2].watchdog == "ok"
    assert plans[-1].duty == (0.0, 0.0) and plans[-1].watchdog == "expired"    # at 0.50, not one tick later
    assert plans[-1].base.expired and plans[-1].base.expired[0].command is FWD
    assert tick(state, clock).watchdog == "expired" and state.next_deadline(clock.t) is None


def test_a_new_limit_or_speed_cap_changes_a_steady_target_at_the_next_tick(rig):
    state, clock = rig
    cruise(state, clock)
    state.set_limits(0.2, None)
    assert state.base_target(FWD) == pytest.approx((0.2, 0.2))
    assert tick(state, clock).duty == pytest.approx((0.26, 0.26))      # ramps down by 0.04
    state.set_limits(1.0, None)
    state.safety.set_speed_cap(0.1, "battery low")
    assert state.base_target(FWD) == pytest.approx((0.1, 0.1))
    state.safety.set_speed_cap(None)
    assert state.base_target(FWD) == pytest.approx((0.3, 0.3))


def test_another_command_with_equal_values_or_another_kind_is_computed_for_itself(rig):
    state, _ = rig
    first = state.base_target(FWD)
    assert state.base_target(FWD) is first
    assert state.base_target(BaseVelocity(0.3, 0.0)) == first
    assert state.base_target(TrackDuty(0.3, 0.3)) == pytest.approx((0.3, 0.3))
    assert state.base_target(BaseVelocity(0.3, 1.0)) == pytest.approx((0.15, 0.45))
    assert state.base_target(None) == (0.0, 0.0)


def test_a_higher_source_takes_over_a_steady_drive_at_the_next_tick(rig):
    state, clock = rig
    cruise(state, clock)
    state.offer_velocity("console", BaseVelocity(-0.3, 0.0))
    plan = tick(state, clock)
    assert plan.base.driver == "console" and plan.duty == pytest.approx((0.26, 0.26))


# ---------------------------------------------------------------------------- the arbiter's reused winner
def test_a_selection_is_reused_while_nothing_changes_and_follows_every_change():
    arb = Arbiter({"artex": 10, "console": 40}, {"artex": 0.5, "console": 0.5})
    arb.offer("artex", BASE, FWD, 0.0)
    first = arb.select(BASE, 0.1)
    assert arb.select(BASE, 0.2) is first and first.driver == "artex"
    assert arb.holder(BASE, 0.6) is None and arb.holder(BASE, 0.3) is first.winner   # an earlier time: fresh again
    arb.offer("console", BASE, FWD, 0.3)
    assert arb.select(BASE, 0.35).driver == "console"
    arb.drop(["console"])
    assert arb.select(BASE, 0.4).driver == "artex"
    arb.stop("console", 0.45)                                           # artex streamed: held at zero
    sel = arb.select(BASE, 0.46)
    assert sel.velocity is None and sel.winner is not None and sel.winner.source == "artex"
    arb.halt()
    assert arb.select(BASE, 0.47).winner is not None                    # the zero-held claim is kept
    arb.re_engage("artex")
    arb.offer("artex", BASE, FWD, 0.5)
    sel = arb.select(BASE, 0.99)
    assert sel.driver == "artex" and arb.next_expiry(0.99) == 1.0
    sel = arb.select(BASE, 1.0)                                         # its deadline: expired, dropped
    assert sel.winner is None and [c.command for c in sel.expired] == [FWD]
    assert arb.select(BASE, 1.02).expired == () and arb.next_expiry(1.02) is None


def test_the_claims_table_counts_every_change_and_refuses_uncounted_ones():
    claims = Claims()
    claims[("base", "artex")] = 1
    claims.pop(("base", "artex"))
    claims[("base", "artex")] = 2
    del claims[("base", "artex")]
    assert claims.version == 4
    for change in (claims.clear, lambda: claims.update({}), lambda: claims.setdefault(1, 2), claims.popitem):
        with pytest.raises(TypeError):
            change()


SOURCES = ("artex", "sim2bot", "robot_msg", "console")
OPS = st.lists(st.tuples(st.sampled_from(["offer", "latch", "select", "holder", "stop", "halt", "drop", "expiry"]),
                         st.sampled_from(SOURCES), st.sampled_from([BASE, JOINTS]),
                         st.floats(-0.3, 0.7)), max_size=40)


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_the_reused_winner_is_always_the_one_found_afresh(ops):
    arb = Arbiter({"artex": 10, "sim2bot": 20, "robot_msg": 30, "console": 40}, {s: 0.5 for s in SOURCES})
    now = 0.0
    for op, source, channel, step in ops:
        now = round(now + step, 6)       # time may go back: the scheduler asks at the last tick's time
        command = JointVelocity((0.1,)) if channel == JOINTS else FWD
        if op == "offer":
            arb.offer(source, channel, command, now)
        elif op == "latch":
            arb.latch(source, channel, now)
        elif op == "select":
            sel = arb.select(channel, now)
            assert sel.winner is afresh(arb, channel, now)
            assert not any(c.fresh(now) for c in sel.expired)
        elif op == "stop":
            arb.stop(source, now)
        elif op == "halt":
            arb.halt()
        elif op == "drop":
            arb.drop([source], (channel,))
        elif op == "expiry":
            tops = [afresh(arb, ch, now) for ch in (BASE, JOINTS)]
            due = [c.deadline_s for c in tops if c is not None and c.command is not None]
            assert arb.next_expiry(now) == (min(due) if due else None)
        assert arb.holder(channel, now) is afresh(arb, channel, now)


def afresh(arb: Arbiter, channel: str, now: float):
    """The winner by the module docstring's rule, from the claims as they are: highest priority, then newest."""
    fresh = [c for (ch, _), c in arb._claims.items() if ch == channel and c.fresh(now)]
    return max(fresh, key=lambda c: (arb.priority(c.source), c.receipt_s), default=None)


# ---------------------------------------------------------------------------- the stall detector's quiet
def test_the_stall_detector_still_trips_and_clears_after_quiet_ticks():
    det = StallDetector(StallSettings(duty=0.3, speed_mps=0.02, for_s=0.2, max_current_a=None,
                                      current_for_s=0.1, counts_per_m=4000.0))
    for k in range(5):
        assert det.update(k * DT, (0.1, 0.1), None) == (None, False)     # quiet: reset once, then skipped
    reason = None
    for k in range(5, 30):
        fb = MotorFeedback(left_cps=0.0, right_cps=0.0)                 # a new reading each tick, pushing
        reason, _ = det.update(k * DT, (0.5, 0.5), fb)
        if reason:
            break
    assert reason and det.tripped
    assert det.update(1.0, (0.0, 0.0), None) == (None, True)            # quiet again: cleared
    assert det.update(1.02, (0.0, 0.0), None) == (None, False)
    assert all(h.since is None for h in (*det._speed, *det._amps))


def test_the_battery_after_a_calm_stretch_at_one_voltage_still_caps_trips_and_recovers():
    det = BatteryDetector(BatterySettings(low_v=10.0, critical_v=9.0, hysteresis_v=0.2, low_for_s=0.5,
                                          critical_for_s=0.5, average_s=0.1, sag_ohm=0.0, low_speed_mps=0.1))

    def feed(t0: float, volts: float, ticks: int):
        sample = PowerSample(voltage_v=volts, current_a=0.0, power_w=0.0, t_mono_s=t0)
        return [det.update(round(t0 + k * DT, 9), sample) for k in range(ticks)]

    assert feed(0.0, 12.0, 20) == [(None, False)] * 20 and not det.low     # calm: the same voltage, skipped
    feed(0.4, 9.5, 30)                                  # under low (not critical) for 0.6 s: capped
    assert det.low and det.volts == 9.5 and not det.critical
    feed(1.0, 9.5, 5)
    assert det.low                                      # the same low voltage keeps the cap (no calm skip)
    got = feed(1.1, 8.5, 30)                            # under critical for 0.5 s: trips once
    assert [r for r, _ in got if r] and sum(1 for r, _ in got if r) == 1 and det.critical
    got = feed(1.7, 12.0, 10)                           # recovered: cleared once, the cap lifted
    assert [c for _, c in got].count(True) == 1 and not det.low and not det.critical
    assert feed(1.9, 12.0, 10) == [(None, False)] * 10
    feed(2.1, 9.8, 10)                                  # low again after a calm stretch: timed afresh
    assert not det.low and det._low_hold.since is not None
    feed(2.3, 9.8, 30)
    assert det.low


def test_a_failsafe_trip_during_a_steady_drive_zeroes_the_next_tick(rig):
    state, clock = rig
    plan = cruise(state, clock)
    plan, tripped = check_failsafes(state, plan, Readings(t_unix_s=1.0))
    assert not tripped
    state.safety.trip("tilt", "pitch 40 deg", 1.0)
    plan = tick(state, clock)
    assert plan.duty == (0.0, 0.0) and state.cmd == (0.0, 0.0)


# ---------------------------------------------------------------------------- the scheduler's bell
def test_the_bell_keeps_a_ring_until_cleared_and_a_set_after_a_clear_rings_again():
    bell = Bell()
    assert not bell.is_set() and bell.wait(0.0) is False
    bell.set()
    bell.set()                                  # twice: still one ring, no error
    assert bell.is_set() and bell.wait(0.0) is True and bell.wait(0.0) is True
    bell.clear()
    assert not bell.is_set() and bell.wait(0.0) is False
    bell.set()
    assert bell.wait(0.0) is True
