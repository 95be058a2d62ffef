"""The recorder's tick lateness (robot_agent_control_tick_lateness_seconds) beside the control loop's
rest (docs/safety.md, "The control loop at rest"): a standing tank's rest slots are not late ticks."""

from __future__ import annotations

import pytest

from agent.model import Snapshot, TrackState
from agent.recorder.incidents import tick_lateness

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
