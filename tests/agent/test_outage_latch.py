"""The stop latch across a motor controller outage (docs/safety.md, "When the robot stops the tracks
itself"): a source that re-engages with a zero while the controller is lost and then streams again
does not drive off when the controller answers; it re-engages after the outage first. Real drivers
on the simulated tank's emulators, the control loop on an injected clock (tests/agent/test_control.py's rig)."""

from __future__ import annotations

import time

import pytest

from agent.commands import BaseVelocity, Reset, Stop
from agent.errors import CommandDeclined
from tests.agent.test_control import DT, Rig, make_rig  # noqa: F401 - make_rig is a fixture

FAILURE = "a motor controller failure was in force"


def _tick(rig: Rig, n: int = 1) -> None:
    """``n`` ticks, one period apart, from the clock's time on."""
    for _ in range(n):
        rig.clock.t += DT
        rig.loop.tick(rig.clock.t)


def _stream(rig: Rig, command: BaseVelocity, refused: list[str]) -> None:
    """One command of a source streaming at the loop's rate: submitted, then one tick later."""
    try:
        rig.loop.submit("artex", command)
    except CommandDeclined as err:
        refused.append(str(err))
    _tick(rig)


def _outage(rig: Rig, refused: list[str]) -> None:
    """Drive, unplug the controller and tick until the loop saw the failed write."""
    rig.loop.submit("artex", BaseVelocity(0.5, 0.0))
    rig.tick(3)
    assert rig.duty[0] > 0.0
    rig.sim.motor_emulator.unplug()
    snap = rig.tick(2)
    assert snap.tracks.duty_left == 0.0                   # the loop commands zero at once
    rig.clock.t = rig.k * DT
    _stream(rig, BaseVelocity(0.5, 0.0), refused)         # streaming into the failure: latched out
    assert refused and FAILURE in refused[-1]


def _replug_streaming(rig: Rig, command: BaseVelocity, refused: list[str]) -> None:
    """Replug the controller while the source streams ``command``; return once it answers again."""
    rig.sim.motor_emulator.replug()
    deadline = time.monotonic() + 15.0
    while rig.hw.motor.state != "ok" and time.monotonic() < deadline:
        _stream(rig, command, refused)
        time.sleep(0.01)
    assert rig.hw.motor.state == "ok"
    for _ in range(3):                                    # the loop sees the confirmed write
        _stream(rig, command, refused)


def test_a_source_re_engaging_during_the_outage_and_streaming_on_does_not_drive_off(make_rig):
    rig = make_rig()
    refused: list[str] = []
    _outage(rig, refused)
    rig.loop.submit("artex", BaseVelocity(0.0, 0.0))     # re-engages during the outage...
    n = len(refused)
    _replug_streaming(rig, BaseVelocity(0.5, 0.0), refused)   # ...and streams on through its end
    for _ in range(10):
        _stream(rig, BaseVelocity(0.5, 0.0), refused)
    assert rig.duty == (0.0, 0.0), "the source streaming through the outage drove off when it ended"
    assert len(refused) > n and FAILURE in refused[-1]
    rig.loop.submit("artex", BaseVelocity(0.0, 0.0))     # a zero after the outage re-engages it
    rig.loop.submit("artex", BaseVelocity(0.5, 0.0))
    _tick(rig, 2)
    assert rig.duty[0] > 0.0


def test_a_source_that_let_go_during_the_outage_drives_with_its_next_command(make_rig):
    """Its last command during the outage was a zero: it was not streaming when the outage ended."""
    rig = make_rig()
    refused: list[str] = []
    _outage(rig, refused)
    n = len(refused)
    _replug_streaming(rig, BaseVelocity(0.0, 0.0), refused)
    assert len(refused) == n
    rig.loop.submit("artex", BaseVelocity(0.5, 0.0))
    _tick(rig, 2)
    assert rig.duty[0] > 0.0


@pytest.mark.parametrize("let_go", [Stop(), Reset()], ids=["stop", "reset"])
def test_a_source_streaming_in_the_outage_then_stopping_or_resetting_drives_with_its_next_command(make_rig, let_go):
    """Its own stop or reset after streaming in the outage re-engages it, as a zero does."""
    rig = make_rig()
    refused: list[str] = []
    _outage(rig, refused)
    rig.loop.submit("artex", BaseVelocity(0.0, 0.0))
    rig.loop.submit("artex", BaseVelocity(0.5, 0.0))      # streams in the outage...
    rig.loop.submit("artex", let_go)                      # ...then stops (or resets) before it ends
    sent = rig.clock.t
    n = len(refused)
    rig.sim.motor_emulator.replug()
    deadline = time.monotonic() + 15.0
    while rig.hw.motor.state != "ok" and time.monotonic() < deadline:
        rig.clock.t += 0.0005                             # the loop ticks on; little virtual time passes
        rig.loop.tick(rig.clock.t)
        time.sleep(0.01)
    _tick(rig, 3)
    assert rig.clock.t - sent < 0.5                       # the 0.5 it streamed is still fresh at the end
    _stream(rig, BaseVelocity(0.5, 0.0), refused)
    assert len(refused) == n, refused[n:]
    rig.loop.submit("artex", BaseVelocity(0.5, 0.0))
    _tick(rig, 2)
    assert rig.duty[0] > 0.0


@pytest.mark.parametrize("pause_s", [0.6])
def test_a_source_paused_for_its_timeout_after_streaming_in_the_outage_drives(make_rig, pause_s):
    """Streaming during the outage but silent for its timeout (0.5 s) before it ended: not streaming then."""
    rig = make_rig()
    refused: list[str] = []
    _outage(rig, refused)
    rig.loop.submit("artex", BaseVelocity(0.0, 0.0))
    rig.loop.submit("artex", BaseVelocity(0.5, 0.0))      # streams in the outage, then stops sending
    _tick(rig, round(pause_s / DT))
    rig.sim.motor_emulator.replug()
    deadline = time.monotonic() + 15.0
    while rig.hw.motor.state != "ok" and time.monotonic() < deadline:
        _tick(rig)
        time.sleep(0.01)
    _tick(rig, 3)
    n = len(refused)
    _stream(rig, BaseVelocity(0.5, 0.0), refused)
    assert len(refused) == n
    _tick(rig)
    assert rig.duty[0] > 0.0
