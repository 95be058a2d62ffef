"""The control thread's wake-ups (agent/control/scheduler.py), with a recording tick.

Slots are 10 s apart, so any second tick within the test's few seconds can only
come from a wake-up: the assertions need no timing luck (waits are generous,
and "no further tick" is checked long before the next slot).
"""

from __future__ import annotations

import threading
import time

import pytest

from agent.control.scheduler import MIN_WAKE_SPACING_S, Scheduler

SLOW_HZ = 0.1        # one slot per 10 s


class Recorder:
    """A tick function that records its times and lets the test wait for a count."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._cond = threading.Condition()

    def __call__(self, now: float) -> None:
        with self._cond:
            self.times.append(now)
            self._cond.notify_all()

    def wait_for(self, count: int, timeout_s: float = 5.0) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: len(self.times) >= count, timeout_s)


@pytest.fixture
def run():
    made: list[Scheduler] = []

    def start(deadline=lambda now: None) -> tuple[Scheduler, Recorder]:
        rec = Recorder()
        sched = Scheduler(rec, lambda: None, deadline, rate_hz=SLOW_HZ, clock=time.monotonic)
        made.append(sched)
        sched.start()
        assert rec.wait_for(1)                       # the first slot is at start
        return sched, rec

    yield start
    for sched in made:
        sched.stop(timeout_s=5.0)
        assert not sched.running()                   # stop() interrupts a 10 s wait


def test_wake_runs_a_tick_at_once_instead_of_at_the_next_slot(run):
    sched, rec = run()
    for n in (2, 3):
        sched.wake()
        assert rec.wait_for(n), "wake() did not tick before the next slot"
    assert sched.stats().ticks == 3


def test_a_command_deadline_between_slots_gets_one_extra_tick_not_before_it(run):
    due = {"t": None}
    sched, rec = run(deadline=lambda now: due["t"])
    due["t"] = time.monotonic() + 0.1
    sched.wake()                                     # re-evaluate the wait with the new deadline
    assert rec.wait_for(3)
    assert rec.times[2] >= due["t"]                  # at the deadline, never before
    time.sleep(0.2)
    assert len(rec.times) == 3                       # served once: no spinning on a past deadline


def test_tick_on_the_callers_thread_is_refused_while_the_thread_runs(run):
    sched, _ = run()
    with pytest.raises(RuntimeError):
        sched.tick(0.0)


def test_wake_ups_before_the_tick_runs_are_coalesced_into_one_tick(run):
    gate = threading.Event()
    rec = Recorder()

    def slow_tick(now: float) -> None:               # the first woken tick blocks until the test says
        rec(now)
        gate.wait(5.0)

    sched = Scheduler(slow_tick, lambda: None, lambda now: None, rate_hz=SLOW_HZ, clock=time.monotonic)
    sched.start()
    try:
        assert rec.wait_for(1)                       # the slot at start, blocked in the tick
        for _ in range(50):                          # a burst of commands while it runs
            sched.wake()
        gate.set()
        assert rec.wait_for(2)
        time.sleep(0.1)  # real time held on purpose: 20 wake spacings (5 ms) in which more woken ticks would run
        assert len(rec.times) == 2                   # fifty wake-ups, one tick
        assert sched.stats().woken_ticks == 1
    finally:
        gate.set()
        sched.stop(timeout_s=5.0)


def test_woken_ticks_keep_the_minimum_spacing(run):
    sched, rec = run()
    for n in range(2, 12):                           # a stream far faster than 200 Hz
        sched.wake()
        assert rec.wait_for(n)
    woken = rec.times[1:]                            # the first is the slot at start: no spacing after it
    gaps = [b - a for a, b in zip(woken, woken[1:])]
    assert min(gaps) >= MIN_WAKE_SPACING_S           # the spacing is waited out on the same clock
    assert sched.stats().woken_ticks == 10
