"""Halts in the control loop (agent/control/safety.py): the e-stop, failsafe latches, the speed cap.

Real Hardware, real drivers, the simulated tank's emulators; time on an injected clock, the duty
read back from the tank physics the RoboClaw emulator writes into (as tests/agent/test_control.py).
"""

from __future__ import annotations

import logging

import pytest

from agent.control import ControlLoop
from agent.errors import CommandDeclined, CommandRejected
from agent.devices.hardware import Hardware
from agent.commands import BaseVelocity, Gripper, JointPosition, JointVelocity, Reset, Stop, TrackDuty
from agent.devices.simtank import SimTank
from tests.agent.test_control import DT, Clock, Rig, config

WALL0 = 1_764_612_000.0   # 2025-12-01 18:00:00 UTC
SOURCES = ("artex", "sim2bot", "robot_msg", "console")


@pytest.fixture
def rig():
    cfg = config()
    sim = SimTank(cfg)
    hw = Hardware.from_config(cfg, sim)
    hw.start()
    clock = Clock()
    r = Rig(ControlLoop(cfg, hw, clock=clock, wall=lambda: WALL0 + clock.t), hw, sim, clock)
    yield r
    r.loop.close(timeout_s=0.1)
    hw.close()
    sim.close()


def drive(rig: Rig, source: str, cmd=None, ticks: int = 10):
    """Stream ``cmd`` from ``source`` once per tick for ``ticks`` ticks; returns the last snapshot."""
    snap = None
    for _ in range(ticks):
        rig.loop.submit(source, cmd or BaseVelocity(0.5, 0.0))
        snap = rig.tick()
    return snap


def test_estop_zeroes_at_once_refuses_every_source_and_shows_in_the_snapshot(rig, caplog):
    drive(rig, "sim2bot", ticks=15)
    assert rig.duty[0] > 0.2
    with caplog.at_level(logging.WARNING):
        assert rig.loop.estop("console", "operator pressed STOP") is True
    snap = rig.tick()
    assert rig.duty == (0.0, 0.0) and snap.tracks.duty_left == 0.0          # no ramp down
    (halt,) = snap.safety.halts
    assert (halt.kind, halt.by, halt.reason) == ("estop", "console", "operator pressed STOP")
    assert halt.since_unix_s == pytest.approx(WALL0 + 15 * DT)
    assert snap.safety.estop is halt and snap.safety.halted
    assert any("EMERGENCY STOP set by console" in r.getMessage() for r in caplog.records)
    for source in SOURCES:               # the setter's own source included
        for cmd in (BaseVelocity(0.3, 0.0), TrackDuty(0.5, 0.5), JointVelocity((0.1, 0.0)),
                    JointPosition((0.5,)), Gripper(0.5), Reset()):
            with pytest.raises(CommandDeclined, match="emergency stop set by console since 2025-12-01 18:00:00 UTC") \
                    as err:
                rig.loop.submit(source, cmd)
            assert err.value.reason == "halted"
    rig.loop.submit("artex", Stop())                    # a stop is always accepted
    snap = rig.tick(50)
    assert rig.duty == (0.0, 0.0) and snap.active_source == "" and snap.safety.estop is not None
    assert snap.joints.q == snap.joints.target


def test_estop_is_idempotent_and_keeps_the_first_setter(rig):
    assert rig.loop.estop("cli", "from the shell")
    rig.tick()
    assert rig.loop.estop("console", "again") is False
    (halt,) = rig.tick().safety.halts
    assert (halt.by, halt.reason) == ("cli", "from the shell")


def test_release_moves_nothing_and_a_streamer_reengages_first(rig):
    drive(rig, "artex", ticks=10)
    rig.loop.estop("console", "")
    for _ in range(20):                                  # artex keeps streaming into the e-stop
        with pytest.raises(CommandDeclined):
            rig.loop.submit("artex", BaseVelocity(0.5, 0.0))
        rig.tick()
    rig.loop.release_estop("console")
    snap = rig.tick(10)                                  # 0.2 s: less than artex's 0.5 s timeout
    assert rig.duty == (0.0, 0.0) and snap.safety.halts == () and snap.active_source == ""
    # artex streamed into the e-stop: streaming on is refused until it re-engages
    with pytest.raises(CommandDeclined, match="artex was driving when the emergency stop set by console was in force") as err:
        rig.loop.submit("artex", BaseVelocity(0.5, 0.0))
    assert err.value.reason == "reengage"
    rig.tick()
    assert rig.duty == (0.0, 0.0)
    # a source that was not streaming drives with its first command
    drive(rig, "sim2bot", ticks=5)
    assert rig.duty[0] > 0.0


@pytest.mark.parametrize("reengage", ["pause", "zero", "stop", "reset"])
def test_after_release_each_way_to_reengage(rig, reengage):
    rig.loop.estop("input", "circuit open")
    with pytest.raises(CommandDeclined):
        rig.loop.submit("robot_msg", BaseVelocity(0.5, 0.0))
    rig.loop.release_estop("input")
    if reengage == "pause":
        rig.tick(26)                                    # 0.52 s > the 0.5 s timeout
    elif reengage == "zero":
        rig.loop.submit("robot_msg", BaseVelocity(0.0, 0.0))
    elif reengage == "stop":
        rig.loop.submit("robot_msg", Stop())
    else:
        rig.loop.submit("robot_msg", Reset())
    drive(rig, "robot_msg", ticks=5)
    assert rig.duty[0] > 0.0


def test_release_without_estop_and_bad_setters_change_nothing(rig, caplog):
    drive(rig, "sim2bot", ticks=5)
    with caplog.at_level(logging.INFO):
        with pytest.raises(CommandDeclined, match="no emergency stop is set"):
            rig.loop.release_estop("cli")
        for who in ("artex", "sim2bot", "robot_msg", "robot", "", None, 3):
            with pytest.raises(CommandRejected, match="may not set it; allowed: console, cli, input"):
                rig.loop.estop(who, "x")
        with pytest.raises(CommandRejected, match="may not release"):
            rig.loop.release_estop("artex")
        with pytest.raises(CommandRejected, match="reason must be a string"):
            rig.loop.estop("cli", 5)
    assert sum("refused" in r.getMessage() for r in caplog.records) >= 9
    snap = drive(rig, "sim2bot", ticks=3)
    assert snap.safety.halts == () and rig.duty[0] > 0.0
    rig.loop.estop("cli", "")
    with pytest.raises(CommandRejected):
        rig.loop.release_estop("sim2bot")
    assert rig.tick().safety.estop is not None and rig.duty == (0.0, 0.0)


def test_failsafe_trip_zeroes_and_ends_only_when_cleared_and_a_fresh_command_comes(rig, caplog):
    drive(rig, "console", ticks=15)
    with caplog.at_level(logging.WARNING):
        with rig.loop.locked():
            assert rig.loop.safety.trip("tilt", "roll 41 deg over 35 deg for 0.2 s", WALL0 + 1.0)
            assert not rig.loop.safety.trip("tilt", "roll 42 deg", WALL0 + 1.1)     # idempotent
    assert sum("FAILSAFE tilt" in r.getMessage() for r in caplog.records) == 1
    snap = rig.tick()
    assert rig.duty == (0.0, 0.0)
    (halt,) = snap.safety.halts
    assert (halt.kind, halt.by, halt.cleared, halt.reason) == ("tilt", "robot", False,
                                                               "roll 41 deg over 35 deg for 0.2 s")
    with pytest.raises(CommandDeclined, match="tilt failsafe set by robot"):
        rig.loop.submit("console", BaseVelocity(0.2, 0.0))
    with rig.loop.locked():
        assert rig.loop.safety.condition_cleared("tilt")
    with pytest.raises(CommandDeclined, match="console was driving when the tilt failsafe was in force"):
        rig.loop.submit("console", BaseVelocity(0.2, 0.0))   # streamed into the halt: re-engage first
    snap = rig.tick(30)                                 # cleared: still latched, still zero
    assert rig.duty == (0.0, 0.0) and snap.safety.halts[0].cleared
    rig.loop.submit("console", BaseVelocity(0.0, 0.0))  # fresh command ends the latch
    snap = rig.tick()
    assert snap.safety.halts == ()
    drive(rig, "console", ticks=5)
    assert rig.duty[0] > 0.0


def test_speed_cap_limits_the_tracks_and_shows(rig):
    with rig.loop.locked():
        rig.loop.safety.set_speed_cap(0.3, "battery 6.6 V below low 6.8 V for 10 s")
    snap = drive(rig, "artex", BaseVelocity(1.0, 0.0), ticks=40)
    assert rig.duty == pytest.approx((0.3, 0.3), abs=1e-3)
    assert snap.safety.speed_cap_mps == 0.3 and "6.6 V" in snap.safety.speed_cap_reason
    assert snap.safety.halts == ()
    with rig.loop.locked():
        for bad in (0.0, -1.0, float("nan"), float("inf"), True, "1"):
            with pytest.raises(CommandRejected):
                rig.loop.safety.set_speed_cap(bad, "x")
        rig.loop.safety.set_speed_cap(None)
    snap = drive(rig, "artex", BaseVelocity(1.0, 0.0), ticks=40)
    assert rig.duty == pytest.approx((1.0, 1.0), abs=1e-3) and snap.safety.speed_cap_mps is None


def test_unknown_failsafe_kind_is_rejected(rig):
    with rig.loop.locked(), pytest.raises(CommandRejected, match="unknown failsafe"):
        rig.loop.safety.trip("estop", "x", WALL0)
    assert rig.tick().safety.halts == ()


@pytest.mark.parametrize("halt", ["estop", "tilt"])
def test_a_source_held_through_a_halt_keeps_lower_sources_off_when_it_ends(rig, halt):
    """The operator's key held through an e-stop or a failsafe: when the halt ends the console is
    refused until it re-engages, and its claim held at zero keeps a lower source (the hub) off."""
    drive(rig, "console", ticks=10)
    if halt == "estop":
        rig.loop.estop("cli", "from the shell")
    else:
        with rig.loop.locked():
            rig.loop.safety.trip("tilt", "roll 41 deg over 40 deg for 0.3 s", WALL0)
    for _ in range(5):                                   # the console streams into the halt
        with pytest.raises(CommandDeclined):
            rig.loop.submit("console", BaseVelocity(0.5, 0.0))
        rig.tick()
    if halt == "estop":
        rig.loop.release_estop("cli")
    else:
        with rig.loop.locked():
            rig.loop.safety.condition_cleared("tilt")
    for _ in range(20):                                  # 0.4 s: the hub streams, the console's key still held
        rig.loop.submit("artex", BaseVelocity(0.5, 0.0))
        with pytest.raises(CommandDeclined, match="console was driving when the") as err:
            rig.loop.submit("console", BaseVelocity(0.5, 0.0))
        assert err.value.reason == "reengage"
        snap = rig.tick()
        assert rig.duty == (0.0, 0.0) and snap.active_source == "", "a lower source took the tank"
    rig.loop.submit("console", BaseVelocity(0.0, 0.0))   # a new press: the zero, then the drive
    drive(rig, "console", ticks=5)
    assert rig.duty[0] > 0.0 and rig.loop.snapshot().active_source == "console"
