"""HealthTracker.report (agent/health.py): follows every change, one object while nothing changes."""

from __future__ import annotations

import logging

from agent.health import DEGRADED, LOST, OK, HealthTracker


def test_report_follows_every_change_and_is_reused_while_nothing_changes():
    tracker = HealthTracker("imu", logging.getLogger("test.health"), state=OK)
    first = tracker.report()
    assert (first.state, first.last_error, first.errors) == ("ok", "", 0)
    assert tracker.report() is first                      # asked every tick: no new object per tick
    tracker.fail(DEGRADED, "[errno 121] NACK")
    degraded = tracker.report()
    assert (degraded.state, degraded.last_error, degraded.errors) == ("degraded", "[errno 121] NACK", 1)
    tracker.fail(DEGRADED, "[errno 121] NACK")
    assert tracker.report().errors == 2                   # a repeated error still counts
    tracker.fail(LOST, "[errno 110] timeout")
    assert (tracker.report().state, tracker.report().last_error) == ("lost", "[errno 110] timeout")
    tracker.recover()
    back = tracker.report()
    assert (back.state, back.last_error, back.errors) == ("ok", "", 3)
    assert tracker.report() is back
