"""The motor controller's thread (agent/devices/motorio.py) against the real RoboClaw driver and its
emulator on a pty: a duty posted while a feedback transaction is on the line goes out before the
next transaction (and one posted while that duty is written, right after it: never behind a second
transaction); an unchanged duty is not written again until its refresh is due; a standing tank is
read and rewritten at the rest period, and a duty or a moving track brings the full rate back at once.

Deterministic: duties are posted from the emulator's own thread while it handles a given request
(the worker is then waiting for that reply), and the refresh runs on an injected clock.
"""

from __future__ import annotations

import threading

import pytest

from agent.config.drivers import RoboclawConfig
from agent.devices.motorio import (
    DUTY_REFRESH_S, REST_AFTER_S, TICK_JITTER_S, MotorIO, duty_refresh_s, rest_period_s,
)
from agent.devices.supervisor import Supervised
from drivers import roboclaw as rc
from drivers.emulators.roboclaw import RoboclawEmulator
from drivers.emulators.tank import TankPhysics
from tests.conftest import wait_until

#: Generous bounds for a loaded machine: nothing here waits on timing, only on events.
SETTLE_S = 5.0

ENCODERS = bytes((0x80, rc.CMD_READ_ENCODERS))
SPEEDS = bytes((0x80, rc.CMD_READ_ISPEEDS))


def duty_packet(left: float, right: float) -> bytes:
    return rc.write_packet(0x80, rc.CMD_DUTY_M1M2, rc.duty_value(left).to_bytes(2, "big", signed=True)
                           + rc.duty_value(right).to_bytes(2, "big", signed=True))


@pytest.fixture
def rig():
    made: list = []

    def make(*, clock=None, feedback_hz: float = 20.0, rest_s: float | None = None) -> tuple[RoboclawEmulator, MotorIO]:
        emu = RoboclawEmulator(TankPhysics(auto_step=False), record=256)
        made.append(emu)
        emu.start()
        cfg = RoboclawConfig(kind="roboclaw", port=emu.port, reply_timeout_s=0.5, serial_timeout_s=5.0)
        motor = Supervised("motor", lambda: rc.Roboclaw(cfg), on_open=lambda d: d.stop())
        assert motor.try_open()
        made.append(motor)
        kw = {"clock": clock} if clock is not None else {}
        worker = MotorIO(motor, feedback_hz=feedback_hz, rest_s=rest_s, **kw)
        made.append(worker)
        return emu, worker

    yield make
    for obj in reversed(made):
        obj.close()


def post_on(emu: RoboclawEmulator, request: bytes, post) -> threading.Event:
    """Call ``post()`` on the emulator's thread when it next handles ``request`` (before it replies)."""
    inner, done = emu._on_bytes, threading.Event()

    def on_bytes(data: bytes, now: float) -> None:
        if not done.is_set() and request in bytes(emu._buf) + data:
            done.set()
            post()
        inner(data, now)

    emu._on_bytes = on_bytes
    return done


def after(packets: list[bytes], first: bytes, n: int) -> list[bytes]:
    """The ``n`` packets the emulator received after the first ``first``."""
    i = packets.index(first)
    return packets[i + 1:i + 1 + n]


def test_a_duty_posted_during_a_feedback_read_goes_out_before_the_next_transaction(rig):
    emu, worker = rig()
    posted = post_on(emu, ENCODERS, lambda: worker.post(0.25, -0.25))
    worker.start()
    assert worker.settle(SETTLE_S) and posted.wait(SETTLE_S)
    assert emu.wait_for(lambda: SPEEDS in emu.received(), SETTLE_S)
    assert after(emu.received(), ENCODERS, 2) == [duty_packet(0.25, -0.25), SPEEDS]
    assert emu.motor_duty == pytest.approx([0.25, -0.25], abs=1e-4)


def test_a_duty_posted_while_one_is_slipped_in_waits_for_that_write_alone(rig):
    emu, worker = rig()
    first, second = duty_packet(0.25, -0.25), duty_packet(0.5, 0.5)
    post_on(emu, ENCODERS, lambda: worker.post(0.25, -0.25))
    posted = post_on(emu, first, lambda: worker.post(0.5, 0.5))     # while the first duty is on the line
    worker.start()
    assert posted.wait(SETTLE_S) and worker.settle(SETTLE_S)
    assert emu.wait_for(lambda: SPEEDS in emu.received(), SETTLE_S)
    assert after(emu.received(), ENCODERS, 3) == [first, second, SPEEDS]
    assert emu.motor_duty == pytest.approx([0.5, 0.5], abs=1e-4)
    assert worker.acked and worker.writes == 2


def test_an_unchanged_duty_is_written_again_only_when_its_refresh_is_due(rig):
    now = [0.0]
    emu, worker = rig(clock=lambda: now[0], feedback_hz=0.001)       # one feedback set, at start
    worker.start()
    assert emu.wait_for(lambda: worker.feedback is not None, SETTLE_S)
    duty = duty_packet(0.3, 0.3)
    for _ in range(3):
        worker.post(0.3, 0.3)
        assert worker.settle(SETTLE_S)
    assert (worker.writes, worker.skipped) == (1, 2)
    now[0] += DUTY_REFRESH_S - TICK_JITTER_S                          # due, give or take a tick's jitter:
    worker.post(0.3, 0.3)                                             # written again
    assert worker.settle(SETTLE_S)
    worker.post(0.3, 0.31)                                            # a change is always written
    assert worker.settle(SETTLE_S)
    assert (worker.writes, worker.skipped) == (3, 2)
    assert emu.wait_for(lambda: emu.received()[-1] == duty_packet(0.3, 0.31), SETTLE_S)
    assert emu.received().count(duty) == 2


def test_a_failed_write_is_never_taken_as_written(rig):
    emu, worker = rig(clock=lambda: 0.0, feedback_hz=0.001)
    worker.start()
    assert emu.wait_for(lambda: worker.feedback is not None, SETTLE_S)   # the one feedback set is done
    emu.drop_next_reply(3)                                            # no ack, retries exhausted
    worker.post(0.2, 0.2)
    assert worker.settle(SETTLE_S) is False
    worker.post(0.2, 0.2)                                             # the same duty: sent again
    assert worker.settle(SETTLE_S) is True
    assert (worker.writes, worker.skipped) == (2, 0)
    assert emu.motor_duty == pytest.approx([0.2, 0.2], abs=1e-4)


@pytest.mark.parametrize("cfg, refresh", [
    ({"kind": "roboclaw", "port": "x", "serial_timeout_s": 0.5}, DUTY_REFRESH_S),
    ({"kind": "roboclaw", "port": "x", "serial_timeout_s": 0.2}, 0.04),
    ({"kind": "line", "port": "x", "firmware_timeout_s": 0.1}, 0.02),
])
def test_the_refresh_keeps_within_the_controllers_own_timeout(cfg, refresh):
    from agent.config.drivers import LineMotorConfig
    model = RoboclawConfig if cfg["kind"] == "roboclaw" else LineMotorConfig
    assert duty_refresh_s(model(**cfg)) == pytest.approx(refresh)


@pytest.mark.parametrize("cfg, rest", [
    ({"kind": "roboclaw", "port": "x", "serial_timeout_s": 0.5}, 0.15),     # (0.5 - one 20 Hz tick) / 3
    ({"kind": "line", "port": "x", "firmware_timeout_s": 0.5}, 0.15),
    ({"kind": "roboclaw", "port": "x", "serial_timeout_s": 0.2}, 0.05),
    ({"kind": "line", "port": "x", "firmware_timeout_s": 0.1}, 0.02),       # no slower than moving: the refresh
    ({"kind": "roboclaw", "port": "x", "serial_timeout_s": 2.0}, 0.25),     # REST_PERIOD_S at most
])
def test_the_rest_period_keeps_three_writes_per_the_controllers_timeout_after_a_tick(cfg, rest):
    """docs/line-protocol.md: P at least 3 times per watchdog interval; the zero is posted at ticks, so
    a rewrite may come one tick (at most 50 ms) after it is due."""
    from agent.config.drivers import LineMotorConfig
    model = RoboclawConfig if cfg["kind"] == "roboclaw" else LineMotorConfig
    assert rest_period_s(model(**cfg)) == pytest.approx(rest)


FAST_S, REST_S = 0.05, 0.25



class Stepper:
    """The worker's injected clock, moved by the test: each step runs the feedback set then due."""

    def __init__(self, emu: RoboclawEmulator) -> None:
        self.now = 0.0
        self.emu = emu

    def __call__(self) -> float:
        return self.now

    def read_at(self, worker: MotorIO, t: float) -> None:
        """Move the clock to ``t`` (a set is due by then) and wait for that set's feedback."""
        before = worker.feedback
        self.now = t
        worker.worker.wake()
        # the set is done when its feedback is published and its poll is due again after now
        assert wait_until(lambda: worker.feedback is not before and self.due(worker) > 0, SETTLE_S, 0.001), \
            "no feedback set ran"

    def due(self, worker: MotorIO) -> float:
        return worker.worker.polls[0].due - self.now


def rest(rig) -> tuple[RoboclawEmulator, MotorIO, Stepper]:
    """A worker on a standing tank, its zero duty acknowledged, read until it rests."""
    emu, worker = rig(feedback_hz=1 / FAST_S, rest_s=REST_S, clock=(clock := Stepper(None)))
    clock.emu = emu
    worker.start()
    assert emu.wait_for(lambda: worker.feedback is not None, SETTLE_S)
    worker.post(0.0, 0.0)
    assert worker.settle(SETTLE_S)
    while not worker.resting:
        assert clock.now <= REST_AFTER_S + 3 * FAST_S, "a still tank at zero duty never rested"
        clock.read_at(worker, clock.now + FAST_S)
    assert clock.now >= REST_AFTER_S                   # not before the zero was held REST_AFTER_S
    return emu, worker, clock


def test_a_standing_tank_is_read_and_rewritten_at_the_rest_period_and_a_duty_ends_the_rest(rig):
    emu, worker, clock = rest(rig)
    assert clock.due(worker) == pytest.approx(REST_S)
    clock.read_at(worker, clock.now + REST_S)
    assert worker.resting and clock.due(worker) == pytest.approx(REST_S)
    # the unchanged zero: rewritten at the rest period, not at the moving refresh
    written = worker.writes
    worker.post(0.0, 0.0)                              # last written before the rest: due
    assert worker.settle(SETTLE_S) and worker.writes == written + 1
    clock.now += DUTY_REFRESH_S
    worker.post(0.0, 0.0)
    assert worker.settle(SETTLE_S) and worker.writes == written + 1
    clock.now += REST_S - DUTY_REFRESH_S
    worker.post(0.0, 0.0)
    assert worker.settle(SETTLE_S) and worker.writes == written + 2
    assert worker.resting
    # a duty goes out at once, and the next feedback set is due within the full-rate period
    worker.post(0.3, 0.3)
    assert worker.settle(SETTLE_S)
    assert emu.motor_duty == pytest.approx([0.3, 0.3], abs=1e-4)
    assert not worker.resting and clock.due(worker) <= FAST_S + 1e-9
    clock.read_at(worker, clock.now + FAST_S)
    assert not worker.resting and clock.due(worker) == pytest.approx(FAST_S)


@pytest.mark.parametrize("disturb", ["pushed", "fault", "write failed"])
def test_a_reading_that_is_not_still_or_a_failed_write_ends_the_rest(rig, disturb):
    emu, worker, clock = rest(rig)
    if disturb == "pushed":
        emu.set_encoder_counts(m1=40)                  # the track turned: counts changed
    elif disturb == "fault":
        emu.set_status(0x0040)                         # M1 driver fault (read one set in three)
    else:
        emu.drop_next_reply(3)                         # the zero's rewrite is not acknowledged
        clock.now += REST_S
        worker.post(0.0, 0.0)
        assert worker.settle(SETTLE_S) is False
    for _ in range(3):
        if not worker.resting:
            break
        clock.read_at(worker, clock.now + REST_S)
    assert not worker.resting and clock.due(worker) <= FAST_S + 1e-9
