"""The control loop at rest (agent/control/rest.py, docs/safety.md "The control loop at rest").

The loop runs on an injected clock and the test calls ``tick(now)``; the devices are the simulated
tank's (real Hardware, real drivers, emulators) on real time, so the motor line's own rest is waited
for as a condition. The thread tests at the end use the real scheduler with a recording tick and
assert loose bounds only.
"""

from __future__ import annotations

import threading
import time

import pytest

from agent.commands import BaseVelocity, Gripper, JointVelocity, Stop
from agent.config import AgentConfig
from agent.errors import CommandDeclined
from agent.control import ControlLoop
from agent.control.rest import REST_AFTER_S, Rest
from agent.control.scheduler import Scheduler
from agent.devices.hardware import Hardware
from agent.devices.simtank import SimTank
from tests.conftest import deep_merge, sim_config, wait_until

RATE = 50
DT = 1.0 / RATE
SETTLE_S = 10.0


class Rig:
    """A loop on the simulated tank, ticked by the test on its own clock."""

    def __init__(self, **overrides) -> None:
        base = sim_config()
        base["drivers"].pop("cameras")
        self.cfg = AgentConfig.model_validate(deep_merge(base, overrides))
        self.sim = SimTank(self.cfg)
        self.hw = Hardware.from_config(self.cfg, self.sim)
        self.hw.start()
        self.now = 0.0
        self.loop = ControlLoop(self.cfg, self.hw, clock=lambda: self.now)
        assert wait_until(lambda: self.hw.motor is not None and self.hw.motor.state == "ok", SETTLE_S)

    def tick(self, dt: float = DT):
        self.now += dt
        return self.loop.tick(self.now)

    @property
    def resting(self) -> bool:
        return self.loop.tick_stats().resting

    def rest(self):
        """Tick at the full rate until the loop rests (the motor line rests first, on real time)."""
        if self.tick().tracks.duty_left == 0.0 and self.resting:
            return self.tick(self.loop.rest_period_s)
        assert wait_until(self.hw.motor_resting, SETTLE_S), "the motor line never rested"
        start = self.now
        while not self.resting:
            assert self.now - start <= REST_AFTER_S + 2 * DT, "a still, healthy tank's loop never rested"
            self.tick()
        assert self.now - start >= REST_AFTER_S - 1e-9        # not before the still period
        return self.tick(self.loop.rest_period_s)             # the next slot: one rest period on

    def close(self) -> None:
        self.loop.close(timeout_s=0.1)
        self.hw.close()
        self.sim.close()


@pytest.fixture
def make_rig():
    made: list[Rig] = []

    def make(**overrides) -> Rig:
        made.append(Rig(**overrides))
        return made[-1]

    yield make
    for rig in made:
        rig.close()


def test_the_rest_period_is_the_motor_lines_and_slower_than_the_full_rate(make_rig):
    rig = make_rig()
    assert rig.loop.rest_period_s == pytest.approx(0.15)      # RoboClaw, 0.5 s serial timeout
    assert rig.loop.rest_period_s > rig.loop.period_s
    assert Rest(0.02, 0.02).period_s is None and Rest(None, 0.02).period_s is None


def test_a_standing_tank_rests_and_a_velocity_command_is_applied_at_once_at_full_rate(make_rig):
    rig = make_rig()
    snap = rig.rest()
    assert rig.resting and snap.tracks.duty_left == 0.0
    rig.loop.submit("robot_msg", BaseVelocity(0.5, 0.0))
    snap = rig.tick(0.001)                          # the woken tick, right after the command
    assert not rig.resting
    assert snap.tracks.duty_left > 0.0 and snap.active_source == "robot_msg"
    assert rig.hw.motor_io.acked and rig.sim.physics.duty[0] > 0.0    # on the motor, not only planned
    # the full rate holds while it drives, and the watchdog stops it after its 0.5 s as ever
    for _ in range(10):
        rig.tick()
        assert not rig.resting
    rig.now += 0.5
    snap = rig.tick()
    assert snap.watchdog != "ok" and snap.tracks.duty_left == 0.0 and snap.active_source == ""
    assert not rig.resting


def test_a_stop_and_the_estop_at_rest_are_applied_by_the_tick_they_wake(make_rig):
    rig = make_rig()
    rig.rest()
    rig.loop.submit("artex", BaseVelocity(0.5, 0.0))
    rig.loop.submit("artex", Stop())                # stop wins, whatever came before in the same slot
    snap = rig.tick(0.001)
    assert snap.stopped and snap.tracks.duty_left == 0.0 and rig.sim.physics.duty == [0.0, 0.0]
    assert rig.resting                              # nothing moved: the rest goes on
    rig.loop.submit("artex", BaseVelocity(0.5, 0.0))
    assert rig.tick(0.001).tracks.duty_left > 0.0 and not rig.resting
    rig.loop.submit("console", Stop())              # another source's stop, at the full rate now
    snap = rig.tick(0.001)
    assert snap.stopped and snap.tracks.duty_left == 0.0
    rig.rest()
    assert rig.loop.estop("console", "test")
    snap = rig.tick(0.001)
    assert snap.safety.estop is not None
    with pytest.raises(CommandDeclined):
        rig.loop.submit("artex", BaseVelocity(0.5, 0.0))
    assert rig.tick(0.001).tracks.duty_left == 0.0


def test_a_tilt_at_rest_brings_the_full_rate_back_and_trips_within_the_documented_bound(make_rig):
    rig = make_rig()
    rig.rest()
    tilt_for = rig.cfg.failsafe.tilt.for_s
    rig.sim.tilt(roll_deg=60.0)
    t0 = rig.now

    def tilted() -> bool:
        imu = rig.hw.latest_imu()
        return imu is not None and abs(imu.accel_mps2[1]) > 5.0

    # the IMU's bus thread reads the tilted samples on real time (every 80 ms at rest): wait for them
    assert wait_until(tilted, SETTLE_S)
    snap = rig.tick(rig.loop.rest_period_s)         # the next rest tick sees it: the full rate is back
    assert not rig.resting and not snap.safety.halted
    seen = rig.now
    while not rig.tick().safety.halted:
        assert rig.now - seen <= tilt_for + 2 * DT, "the tilt did not trip within its time at the full rate"
    # docs/safety.md: at rest, own time + one rest tick + one tick after the reading
    assert rig.now - t0 <= tilt_for + rig.loop.rest_period_s + 2 * DT


def test_a_gripper_command_at_rest_wakes_a_tick_and_the_rest_resumes(make_rig):
    rig = make_rig()
    rig.rest()
    rig.loop.submit("console", Gripper(1.0))
    snap = rig.tick(0.001)
    assert snap.gripper == pytest.approx(1.0)
    assert rig.loop.tick_stats().woken_ticks == 0      # self-stepped: the test ticks; the thread's rouse is below


# ---------------------------------------------------------------------------- the thread


class Recorder:
    def __init__(self) -> None:
        self.times: list[float] = []
        self.cond = threading.Condition()
        self.sched: Scheduler | None = None
        self.rest_s: float | None = None

    def __call__(self, now: float) -> None:
        self.sched.rest(self.rest_s)
        with self.cond:
            self.times.append(now)
            self.cond.notify_all()

    def wait_for(self, count: int, timeout_s: float = 5.0) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: len(self.times) >= count, timeout_s)


@pytest.fixture
def sched():
    rec = Recorder()
    s = Scheduler(rec, lambda: None, lambda now: None, rate_hz=RATE, clock=time.monotonic)
    rec.sched = s
    s.start()
    yield s, rec
    s.stop(5.0)


def test_at_rest_the_slots_come_at_the_rest_period_wake_and_rouse_tick_at_once(sched):
    s, rec = sched
    assert rec.wait_for(5)
    rec.rest_s = 10.0                              # a rest period no test outlasts: any tick is a wake-up
    n = len(rec.times)
    assert rec.wait_for(n + 1) and wait_until(s.resting, 5.0)
    n = len(rec.times)
    s.rouse()
    assert rec.wait_for(n + 1), "rouse() at rest did not tick"
    s.wake()
    assert rec.wait_for(n + 2), "wake() at rest did not tick"
    assert s.stats().resting
    rec.rest_s = None                              # the woken tick ends the rest: full rate from it on
    s.wake()
    assert rec.wait_for(n + 3 + 10), "the full rate did not resume after the rest"
    gaps = [b - a for a, b in zip(rec.times[-10:], rec.times[-9:])]
    assert max(gaps) < 1.0                          # slots again, not rest periods


def test_rouse_at_the_full_rate_runs_no_extra_tick(sched):
    s, rec = sched
    assert rec.wait_for(3)
    before = s.stats().woken_ticks
    s.rouse()
    assert rec.wait_for(len(rec.times) + 3)
    assert s.stats().woken_ticks == before


def test_the_loop_keeps_its_rate_at_rest(sched):
    s, rec = sched
    rec.rest_s = 0.1
    assert wait_until(s.resting, 5.0)
    n = len(rec.times)
    assert rec.wait_for(n + 12, 10.0)               # over a second of rest ticks
    assert s.keeps_rate() and s.stats().resting
    assert s.stats().achieved_hz < RATE / 2


def test_a_track_pushed_at_rest_wakes_the_running_loop_back_to_full_rate(make_rig):
    """The real control thread on real time: a track that turns while the tank rests ends the motor line's
    rest, which wakes a tick at once (Hardware.on_rest_end -> Scheduler.rouse), and the full rate is back."""
    rig = make_rig()
    loop = rig.loop
    rig.loop = ControlLoop(rig.cfg, rig.hw)           # the thread's own clock: time.monotonic
    loop.close(timeout_s=0.1)
    rig.loop.start()
    assert wait_until(lambda: rig.loop.tick_stats().resting, SETTLE_S), "the standing tank's loop never rested"
    assert rig.loop.keeps_rate()                      # a resting loop keeps its rate (the systemd watchdog gate)
    woken = rig.loop.tick_stats().woken_ticks
    rig.sim.motor_emulator.set_encoder_counts(m1=400)  # pushed: the counts change between feedback sets
    assert wait_until(lambda: not rig.loop.tick_stats().resting, SETTLE_S), "a pushed track did not end the rest"
    assert rig.loop.tick_stats().woken_ticks > woken  # woken by the motor line, not found at a rest slot
    assert wait_until(lambda: rig.loop.tick_stats().achieved_hz > RATE / 2, SETTLE_S)



class RousedMidTick(Recorder):
    """A tick that begins a 10 s rest; the first one it runs after ``arm`` sees a rouse() land mid-tick (as a
    joint command submitted after the tick read the state, before it set the rest period)."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.roused = threading.Event()     # set once that tick ran; ``at``: its index in ``times``
        self.at = -1

    def __call__(self, now: float) -> None:
        if self.armed:
            self.armed = False
            self.at = len(self.times)
            self.roused.set()
            self.sched.rouse()
            self.rest_s = 10.0
        super().__call__(now)


def test_a_rouse_during_the_tick_that_begins_the_rest_is_not_lost():
    """rouse() found the loop at the full rate (no wake-up), then the rest period put the next slot a whole
    rest period away: the command waited 10 s here (0.15 s on the tank) instead of one full-rate slot."""
    rec = RousedMidTick()
    s = rec.sched = Scheduler(rec, lambda: None, lambda now: None, rate_hz=RATE, clock=time.monotonic)
    s.start()
    try:
        assert rec.wait_for(3)
        rec.armed = True
        assert rec.roused.wait(5.0)
        assert rec.wait_for(rec.at + 2), "a rouse during the tick that began the rest waited the whole rest period"
        assert s.stats().woken_ticks >= 1 and s.resting()
    finally:
        s.stop(5.0)


def test_a_command_at_rest_ramps_its_first_step_over_one_full_rate_period_not_the_rest_slot(make_rig):
    """The time since the last rest tick (up to 0.15 s) is no motion time: the first step of a drive from
    rest is the acceleration limit's step of one 20 ms period, as at 50 Hz (it was max_accel x 0.149 s =
    0.298 m/s at once); the same for a joint's velocity command (its target moved rate x 0.149 s)."""
    rig = make_rig()
    accel = rig.cfg.base.max_accel_mps2
    rig.rest()
    rig.loop.submit("robot_msg", BaseVelocity(1.0, 0.0))
    first = rig.tick(0.149)                              # the command came just before the next rest slot
    assert not rig.resting and rig.sim.physics.duty[0] > 0.0     # applied at once, on the motor
    assert 0.0 < first.tracks.cmd_left_mps <= accel * DT + 1e-9, first.tracks
    second = rig.tick()
    assert second.tracks.cmd_left_mps - first.tracks.cmd_left_mps == pytest.approx(accel * DT)
    rig.loop.submit("robot_msg", Stop())
    rig.tick()
    q0 = rig.rest().joints.q
    rate = 0.5
    rig.loop.submit("robot_msg", JointVelocity((rate,) + (0.0,) * (len(q0) - 1)))
    moved = rig.tick(0.149).joints.target[0] - q0[0]
    assert 0.0 < moved <= rate * DT + 1e-9
