"""The recorder's tick lateness (robot_agent_control_tick_lateness_seconds) beside the control loop's
rest (docs/safety.md, "The control loop at rest"): a standing tank's rest slots are not late ticks."""

from __future__ import annotations

import pytest

from agent.commands import BaseVelocity, Stop
from agent.model import Snapshot, TrackState
from agent.recorder.incidents import tick_lateness
from tests.agent.test_control_rest import make_rig  # noqa: F401 - a fixture

PERIOD, REST = 0.02, 0.15


def snap(t: float, mps: float = 0.0) -> Snapshot:
    return Snapshot(t_mono_s=t, tracks=TrackState(cmd_left_mps=mps, cmd_right_mps=mps))


def test_a_rest_slot_of_a_standing_tank_is_on_time_and_a_late_one_counts_past_the_rest_period():
    assert tick_lateness(snap(1.0), snap(1.0 + REST), PERIOD, REST) == 0.0
    assert tick_lateness(snap(1.0), snap(1.0 + REST + 0.05), PERIOD, REST) == pytest.approx(0.05)
    assert tick_lateness(snap(1.0), snap(1.0 + 0.001), PERIOD, REST) == 0.0     # a woken tick


def test_a_moving_tank_or_a_loop_that_never_rests_counts_against_the_control_period():
    assert tick_lateness(snap(1.0, 0.5), snap(1.0 + REST, 0.5), PERIOD, REST) == pytest.approx(REST - PERIOD)
    assert tick_lateness(snap(1.0), snap(1.0 + REST, 0.5), PERIOD, REST) == pytest.approx(REST - PERIOD)
    assert tick_lateness(snap(1.0), snap(1.0 + REST), PERIOD, None) == pytest.approx(REST - PERIOD)
    assert tick_lateness(snap(1.0), snap(1.0 + 0.025), PERIOD, REST) == pytest.approx(0.005)


def test_the_loops_own_snapshots_say_whether_it_rests_so_a_drive_from_rest_is_on_time_and_a_still_tank_at_full_rate_is_not(make_rig):
    """The real control loop on the simulated tank (its clock injected): each snapshot says whether the
    next slot is a rest period away (Snapshot.resting). The first tick of a drive from rest, woken by the
    command 0.12 s after a rest tick, was counted 0.10 s late (the tank moved at it); a still tank at the
    full rate (the stop's coast-down, before the rest) whose tick came 0.15 s late was counted on time."""
    rig = make_rig()
    rest_tick = rig.rest()
    assert rest_tick.resting is True
    rig.loop.submit("robot_msg", BaseVelocity(0.5, 0.0))
    woken = rig.tick(0.12)                                    # woken by the command, before the next rest slot
    assert woken.tracks.duty_left > 0.0 and woken.resting is False
    assert tick_lateness(rest_tick, woken, rig.loop.period_s, rig.loop.rest_period_s) == 0.0
    rig.loop.submit("robot_msg", Stop())
    still = rig.tick()
    assert still.tracks.duty_left == 0.0 and still.resting is False   # the still period before a rest: full rate
    late = rig.tick(REST)
    assert not rig.resting and late.resting is False
    assert tick_lateness(still, late, rig.loop.period_s, rig.loop.rest_period_s) == pytest.approx(REST - PERIOD)
