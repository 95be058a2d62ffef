"""Source arbitration and the watchdog state machine (agent/control/arbitration.py)."""

from __future__ import annotations

import logging

import pytest

from agent.control.arbitration import BASE, EXPIRED, IDLE, JOINTS, OK, Arbiter, Watchdog
from agent.control.stoplatch import SenderLatch, is_zero
from agent.config import AgentConfig
from agent.commands import BaseVelocity, JointVelocity, TrackDuty

PRIO = {"artex": 10, "sim2bot": 20, "robot_msg": 30}
TIMEOUT = {"artex": 0.5, "sim2bot": 0.5, "robot_msg": 0.2}

FWD = BaseVelocity(0.3, 0.0)
BACK = BaseVelocity(-0.3, 0.0)


@pytest.fixture
def arb() -> Arbiter:
    return Arbiter(PRIO, TIMEOUT)


def test_from_config_reads_priorities_and_timeouts():
    cfg = AgentConfig.model_validate({
        "watchdog": {"velocity_timeout_s": 0.4},
        "control": {"sources": {"artex": {"priority": 5, "timeout_s": 1.0}, "sim2bot": {"priority": 7}}},
    })
    a = Arbiter.from_config(cfg)
    assert [a.priority(s) for s in ("artex", "sim2bot", "robot_msg")] == [5, 7, 0]
    assert [a.timeout_s(s) for s in ("artex", "sim2bot", "robot_msg")] == [1.0, 0.4, 0.4]


def test_highest_priority_fresh_source_drives_and_others_are_counted(arb):
    assert arb.offer("artex", BASE, FWD, 0.0) is None
    above = arb.offer("robot_msg", BASE, BACK, 0.1)
    assert above is None
    assert arb.offer("artex", BASE, FWD, 0.15).source == "robot_msg"
    assert arb.offer("sim2bot", BASE, FWD, 0.16).source == "robot_msg"
    sel = arb.select(BASE, 0.2)
    assert sel.winner.source == "robot_msg" and sel.velocity == BACK
    assert dict(arb.overridden()) == {"artex": 1, "sim2bot": 1, "robot_msg": 0}
    assert [s for s, _ in arb.overridden()] == ["artex", "sim2bot", "robot_msg"]


def test_lower_source_takes_over_when_higher_times_out(arb):
    arb.offer("robot_msg", BASE, BACK, 0.0)       # timeout 0.2 s
    arb.offer("artex", BASE, FWD, 0.1)            # timeout 0.5 s, overridden now
    assert arb.select(BASE, 0.199).winner.source == "robot_msg"
    sel = arb.select(BASE, 0.2)                   # deadline reached: not fresh any more
    assert sel.winner.source == "artex" and [c.source for c in sel.expired] == ["robot_msg"]
    sel = arb.select(BASE, 0.6)
    assert sel.winner is None and [c.source for c in sel.expired] == ["artex"]


def test_equal_priority_newest_wins():
    a = Arbiter({"artex": 5, "sim2bot": 5}, {"artex": 0.5, "sim2bot": 0.5})
    a.offer("artex", BASE, FWD, 0.0)
    assert a.offer("sim2bot", BASE, BACK, 0.1) is None
    assert a.select(BASE, 0.2).winner.source == "sim2bot"
    a.offer("artex", BASE, FWD, 0.3)
    assert a.select(BASE, 0.35).winner.source == "artex"
    assert dict(a.overridden()) == {"artex": 0, "sim2bot": 0}


def test_latest_command_of_a_source_wins(arb):
    arb.offer("sim2bot", BASE, FWD, 0.0)
    arb.offer("sim2bot", BASE, BACK, 0.01)
    assert arb.select(BASE, 0.02).velocity == BACK


def test_channels_are_independent(arb):
    arb.offer("robot_msg", BASE, FWD, 0.0)
    assert arb.offer("artex", JOINTS, JointVelocity((0.1,)), 0.0) is None
    assert arb.select(JOINTS, 0.01).winner.source == "artex"
    assert arb.select(BASE, 0.01).winner.source == "robot_msg"


def test_latched_refused_below_a_fresh_higher_claim(arb):
    arb.offer("sim2bot", JOINTS, JointVelocity((0.1,)), 0.0)
    refused_by = arb.latch("artex", JOINTS, 0.1)
    assert refused_by.source == "sim2bot"
    assert dict(arb.overridden())["artex"] == 1
    assert arb.select(JOINTS, 0.1).velocity == JointVelocity((0.1,))   # nothing changed
    assert arb.latch("artex", JOINTS, 0.6) is None                     # sim2bot stale by then


def test_latch_drops_velocity_claims_at_or_below_its_priority(arb):
    arb.offer("artex", JOINTS, JointVelocity((0.1,)), 0.0)
    arb.offer("sim2bot", JOINTS, JointVelocity((0.2,)), 0.0)
    assert arb.latch("sim2bot", JOINTS, 0.1) is None
    sel = arb.select(JOINTS, 0.2)
    assert sel.winner.source == "sim2bot" and sel.velocity is None      # a latched claim drives
    assert arb.offer("artex", JOINTS, JointVelocity((0.3,)), 0.3).source == "sim2bot"
    assert arb.select(JOINTS, 0.61).velocity == JointVelocity((0.3,))   # claim over, artex's command fresh


def test_would_refuse_does_not_count(arb):
    arb.latch("robot_msg", JOINTS, 0.0)
    assert arb.would_refuse("artex", JOINTS, 0.1).source == "robot_msg"
    assert arb.would_refuse("robot_msg", JOINTS, 0.1) is None
    assert dict(arb.overridden())["artex"] == 0


def test_drop_by_source_and_channel(arb):
    arb.offer("artex", BASE, FWD, 0.0)
    arb.offer("artex", JOINTS, JointVelocity((0.1,)), 0.0)
    arb.offer("sim2bot", BASE, FWD, 0.0)
    dropped = arb.drop(["artex"], (BASE,))
    assert [(c.source, c.channel) for c in dropped] == [("artex", BASE)]
    assert arb.holder(JOINTS, 0.1).source == "artex"
    assert len(arb.drop()) == 2
    assert arb.holder(BASE, 0.1) is None and arb.holder(JOINTS, 0.1) is None


def test_watchdog_states_and_logs(arb, caplog):
    wd = Watchdog()
    assert wd.update((arb.select(BASE, 0.0), arb.select(JOINTS, 0.0))) == IDLE
    arb.offer("artex", BASE, FWD, 0.0)
    assert wd.update((arb.select(BASE, 0.1), arb.select(JOINTS, 0.1))) == OK
    with caplog.at_level(logging.INFO, logger="agent.control.arbitration"):
        assert wd.update((arb.select(BASE, 0.5), arb.select(JOINTS, 0.5))) == EXPIRED
        assert wd.update((arb.select(BASE, 0.6), arb.select(JOINTS, 0.6))) == EXPIRED
        fired = [r for r in caplog.records if "older than" in r.getMessage()]
        assert len(fired) == 1 and "artex" in fired[0].getMessage()
        arb.offer("artex", BASE, FWD, 1.0)
        assert wd.update((arb.select(BASE, 1.0), arb.select(JOINTS, 1.0))) == OK
        assert sum("resumes" in r.getMessage() for r in caplog.records) == 1
    arb.drop()
    assert wd.update((arb.select(BASE, 1.1), arb.select(JOINTS, 1.1))) == IDLE   # dropped, not timed out


def test_watchdog_does_not_fire_when_another_source_takes_over(arb):
    wd = Watchdog()
    arb.offer("robot_msg", BASE, FWD, 0.0)
    arb.offer("artex", BASE, BACK, 0.0)
    assert wd.update((arb.select(BASE, 0.1), arb.select(JOINTS, 0.1))) == OK
    assert wd.update((arb.select(BASE, 0.25), arb.select(JOINTS, 0.25))) == OK   # artex takes over
    assert wd.update((arb.select(BASE, 0.5), arb.select(JOINTS, 0.5))) == EXPIRED


def test_watchdog_reset_goes_idle(arb):
    wd = Watchdog()
    arb.offer("artex", BASE, FWD, 0.0)
    wd.update((arb.select(BASE, 0.0),))
    wd.update((arb.select(BASE, 0.6),))
    assert wd.state == EXPIRED
    wd.reset()
    assert wd.state == IDLE


def test_next_expiry_is_the_earliest_driving_deadline(arb):
    assert arb.next_expiry(0.0) is None
    arb.offer("artex", BASE, FWD, 0.0)                          # 0.5
    arb.offer("robot_msg", JOINTS, JointVelocity((0.1,)), 0.1)  # 0.3
    arb.offer("sim2bot", JOINTS, JointVelocity((0.2,)), 0.0)    # overridden: not driving
    assert arb.next_expiry(0.15) == pytest.approx(0.3)
    arb.latch("robot_msg", JOINTS, 0.2)                          # latched claims have no expiry to serve
    assert arb.next_expiry(0.25) == pytest.approx(0.5)
    assert arb.next_expiry(0.6) is None


# ---------------------------------------------------------------------------- the stop latch (docs/safety.md)


def test_stop_drops_every_claim_and_latches_out_the_other_streaming_sources(arb):
    arb.offer("artex", BASE, FWD, 0.0)
    arb.offer("sim2bot", JOINTS, JointVelocity((0.1,)), 0.0)
    arb.offer("robot_msg", BASE, BACK, 0.0)                      # timeout 0.2: stale at 0.3
    dropped = arb.stop("artex", 0.3)
    assert sorted((c.source, c.channel) for c in dropped) == [("artex", BASE), ("robot_msg", BASE),
                                                              ("sim2bot", JOINTS)]
    assert arb.latched_out("artex") is None                       # the stopper
    assert arb.latched_out("robot_msg") is None                   # not streaming any more when the stop came
    assert arb.latched_out("sim2bot").stopper == "artex"
    assert arb.latched_out("sim2bot").last_s == 0.3
    sel = arb.select(JOINTS, 0.3)                                 # held at zero: a claim without a command
    assert sel.winner.source == "sim2bot" and sel.velocity is None and sel.driver == ""
    assert arb.select(BASE, 0.3).winner is None


def test_a_held_claim_lasts_until_its_deadline_and_keeps_lower_sources_off(arb):
    arb.offer("robot_msg", BASE, BACK, 0.0)                        # deadline 0.2
    arb.stop("sim2bot", 0.1)
    assert arb.offer("sim2bot", BASE, FWD, 0.11).source == "robot_msg"    # the stopper is below it
    assert arb.offer("artex", BASE, FWD, 0.12).source == "robot_msg"
    assert arb.select(BASE, 0.15).driver == ""
    sel = arb.select(BASE, 0.2)                                    # the hold ended at robot_msg's deadline
    assert sel.driver == "sim2bot" and sel.velocity == FWD and sel.expired == ()   # not a watchdog firing


def test_hold_renews_the_claim_at_zero_and_restarts_the_pause(arb):
    arb.offer("sim2bot", BASE, FWD, 0.0)
    arb.stop("artex", 0.1)
    arb.hold("sim2bot", BASE, 0.4)
    assert arb.latched_out("sim2bot").last_s == 0.4 and arb.latched_out("sim2bot").stopper == "artex"
    assert arb.holder(BASE, 0.89).source == "sim2bot" and arb.holder(BASE, 0.9) is None
    arb.hold("sim2bot", JOINTS, 0.5)                               # any channel the refused command was for
    assert arb.holder(JOINTS, 0.6).command is None


def test_a_stop_re_engages_the_stopper_and_a_later_stop_keeps_a_held_source_latched(arb):
    arb.offer("sim2bot", BASE, FWD, 0.0)
    arb.offer("robot_msg", BASE, BACK, 0.0)
    arb.stop("artex", 0.1)                                         # both latched out
    arb.hold("sim2bot", BASE, 0.15)
    arb.stop("sim2bot", 0.16)                                      # sim2bot's own stop re-engages it ...
    assert arb.latched_out("sim2bot") is None
    assert arb.latched_out("robot_msg").stopper == "sim2bot"       # ... robot_msg's held claim keeps it latched
    assert arb.holder(BASE, 0.17).source == "robot_msg"


def test_re_engage_ends_the_latch(arb):
    arb.offer("sim2bot", BASE, FWD, 0.0)
    arb.stop("artex", 0.1)
    assert arb.re_engage("sim2bot").stopper == "artex"
    assert arb.latched_out("sim2bot") is None and arb.re_engage("sim2bot") is None
    assert arb.offer("sim2bot", BASE, FWD, 0.2) is None and arb.select(BASE, 0.2).driver == "sim2bot"


@pytest.mark.parametrize("command, zero", [
    (BaseVelocity(0.0, 0.0), True), (BaseVelocity(-0.0, 0.0), True), (BaseVelocity(0.0, 0.1), False),
    (TrackDuty(0.0, 0.0), True), (TrackDuty(0.0, 0.01), False),
    (JointVelocity((0.0, 0.0)), True), (JointVelocity((0.0, 0.2)), False)])
def test_is_zero(command, zero):
    assert is_zero(command) is zero


def test_sender_latch_between_the_senders_of_one_source():
    rooms = SenderLatch(0.5)
    assert rooms.velocity("room a", FWD, 0.0) is None
    assert rooms.velocity("room b", FWD, 0.0) is None
    assert rooms.velocity("room c", FWD, -1.0) is None       # not streaming any more at the stop
    assert rooms.stop("room a", 0.1) == ["room b"]
    assert rooms.velocity("room a", FWD, 0.12) is None        # the stopper drives on
    refusal = rooms.velocity("room b", FWD, 0.15)
    assert refusal.startswith("room b was streaming when room a sent stop")
    assert refusal.endswith("a zero velocity command, a stop, a reset, or nothing for 0.50 s")
    assert rooms.velocity("room c", FWD, 0.15) is None
    assert rooms.velocity("room b", FWD, 0.64) is not None    # 0.49 s since its last refusal
    assert rooms.velocity("room b", FWD, 1.15) is None        # paused over 0.5 s


@pytest.mark.parametrize("engage", ["zero", "stop", "reset"])
def test_sender_latch_re_engage(engage):
    rooms = SenderLatch(0.5)
    rooms.velocity("room b", FWD, 0.0)
    rooms.stop("room a", 0.1)
    assert rooms.velocity("room b", FWD, 0.2) is not None
    if engage == "zero":
        assert rooms.velocity("room b", BaseVelocity(0.0, 0.0), 0.25) is None
    elif engage == "stop":
        assert rooms.stop("room b", 0.25) == []                   # room a sent no velocity command
    else:
        rooms.reset("room b")
    assert rooms.velocity("room b", FWD, 0.3) is None
