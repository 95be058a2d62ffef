"""HealthTracker.report (agent/devices/health.py): follows every change, one object while nothing changes."""

from __future__ import annotations

import logging

from agent.devices.health import DEGRADED, LOST, OK, HealthTracker


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


def test_a_device_not_opened_yet_reports_starting_until_its_first_open_or_failure(caplog):
    caplog.set_level(logging.DEBUG, logger="test.health")
    up = HealthTracker("motor", logging.getLogger("test.health"), last_error="not opened yet")
    assert up.report().state == "starting" and up.state == LOST      # the reopener still opens it
    up.recover()
    assert up.report().state == "ok" and "motor: starting -> ok" in caplog.text
    never = HealthTracker("imu", logging.getLogger("test.health"))
    never.fail(LOST, "no I2C bus 7")
    assert never.report().state == "lost"                            # a failure is no longer starting
    assert [r.levelno for r in caplog.records if "imu" in r.getMessage()] == [logging.WARNING]
