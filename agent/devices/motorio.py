"""The motor controller's own thread: duty writes and feedback reads off the control thread.

:class:`MotorIO` owns the serial exchange with one supervised motor controller, on its
:class:`agent.devices.worker.DeviceWorker` (which also reopens the controller when lost). The control thread only posts the newest duty (:meth:`post`, never
blocks: latest value wins, an older duty not yet written is dropped) and reads
what the worker published (:attr:`acked`, :attr:`feedback`). The worker writes a
posted duty before anything else, and between duties reads the feedback set at
``feedback_hz``. A silent controller therefore costs the control thread nothing:
its timeouts and retries run here, and when the supervisor declares it lost the
driver is closed here too (agent/devices/supervisor.py drops it inside the failed call), and
reopened here after its backoff.

An unchanged duty is not written again (latest wins, and it is already on the
controller) until ``refresh_s`` after its acknowledged write (:func:`duty_refresh_s`:
0.1 s, or a fifth of the controller's own stop timeout): a standing tank leaves
the line to the feedback reads, so a new command finds it idle more often. A
failed write, or a new driver after a reopen, always writes again.

At rest (docs/safety.md, "The motor line at rest", gives the reasoning): once the zero duty has been
acknowledged and the feedback has shown the tracks still (encoder counts unchanged, speeds zero,
currents under :data:`REST_CURRENT_A`, status word clear) for :data:`REST_AFTER_S`, feedback
sets and the unchanged zero's rewrite both come every ``rest_s`` (:func:`rest_period_s`: 0.15 s
for a controller with the default 0.5 s stop timeout, at most 0.25 s) instead of ``1 / feedback_hz``
and ``refresh_s`` (the rewrite at the control loop's rest ticks, which come every ``rest_s`` too:
agent/control/rest.py; every half ``rest_s`` in the second before the loop rests): a standing tank's line carries ~27 transactions a second instead of ~70 (~16 at
0.25 s), and its thread and the
emulator's wake that much less. Any other reading, a non-zero duty, a failed write or a new driver
ends the rest at once: a non-zero duty is written at once as always, and the next feedback set is
due within ``1 / feedback_hz`` of it.

With ``zero_at_open`` (the motor's ``on_open`` writes a zero duty, as agent/devices/hardware.py's
does), a controller reopened since a failed write counts as answering (:meth:`MotorIO.post`: it
acknowledged that zero; the control loop sees it answer at the first tick that finds it open), and
before the first duty is posted (the control loop's first tick) the worker keeps the zero written
every ``refresh_s`` on its own: a controller with its own watchdog (the line firmware's ``T``, the
RoboClaw's serial timeout) is fed from its open on, while the other devices open and the control
loop starts (docs/line-protocol.md, "Host behaviour"), so its watchdog does not trip at every
start. A zero is all it writes; the first post ends it for good.

Bounds (docs/architecture.md, "Hardware"): a posted duty waits at most for the
one transaction in progress. The worker takes a pending duty before every
transaction it starts: between duties, before a feedback set, and inside a
serial controller's set before each of its transactions, retries of a failed
read included (drivers/serialport.py ``read_feedback(between)``, which also writes a duty
posted while the previous slipped-in duty was on the line before it goes on).
On a RoboClaw the longest transaction is the combined encoder read (2.0 ms at
115200 baud, 4.1 ms at 38400, reply latency included; drivers/roboclaw.py).
With a silent controller the wait is the driver's reply timeout times its retries.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

from agent.devices.health import LOST
from agent.devices.supervisor import Supervised
from agent.devices.worker import DeviceWorker, Poll
from drivers.base import MotorController, MotorFeedback
from drivers.registry import driver_class

log = logging.getLogger(__name__)

Duty = tuple[float, float]

#: Longest time an unchanged duty goes unwritten, s (``duty_refresh_s`` caps it further).
DUTY_REFRESH_S = 0.1
#: Unchanged-duty writes per period of the controller's own timeout (``MotorController.own_timeout_s``).
REFRESHES_PER_TIMEOUT = 5
#: Longest period of the feedback sets and of the zero duty's rewrite at rest, s (:func:`rest_period_s`).
REST_PERIOD_S = 0.25
#: How long the zero duty must be acknowledged and the tracks read still before the rest begins, s:
#: a stop's coast-down and the stall and current checks right after it run at the full rate.
REST_AFTER_S = 1.0
#: A motor current at or over this, A, is no rest (a RoboClaw reports 10 mA steps; a driven or
#: blocked motor draws amps).
REST_CURRENT_A = 0.5
#: The control loop posts the zero at each tick, every ``rest_s`` at its own rest: a rewrite at rest
#: comes up to this long after ``rest_s`` since the last (one tick at control.rate_hz's 20 Hz floor
#: before the loop rests; a rest tick's lateness and the transaction in progress after), s.
TICK_ALLOWANCE_S = 0.05
#: A tick may come this much early against the last write, s: a refresh equal to the tick period
#: (0.02 s at the line firmware's 0.1 s minimum timeout) still writes at every tick, not every other.
TICK_JITTER_S = 0.005
#: At rest an unchanged zero is rewritten when its last write is this share of ``rest_s`` old: the
#: control loop's rest ticks come every ``rest_s`` (agent/control/rest.py), so each one rewrites it even
#: when the last write went out late behind a transaction; ticks at the full rate rewrite it every
#: half ``rest_s`` or so (the control loop rests 1 s after the motor line does).
REST_TICK_SHARE = 0.5
#: Valid packets per period of the controller's own stop timeout at rest (docs/line-protocol.md:
#: the line firmware's P command at least 3 times per watchdog interval).
REST_WRITES_PER_TIMEOUT = 3
#: A feedback set due within this share of its period of the rewrite of an unchanged duty (a refresh,
#: a rest tick's zero) runs right after it, in the same wake-up of the thread; one that ran within it
#: before the rewrite moves the next set to a period after it (:meth:`MotorIO._ride`).
RIDE_SHARE = 0.5
#: A set that rode along with a rewrite (or was moved by one) is due this much more than its period
#: after it, s: the next rewrite (one refresh, two sets, later moving; one rest tick later at rest)
#: then comes just before that set is due and takes it along again, although the ticks jitter.
RIDE_LAG_S = 0.005
#: A rewrite takes sets along only when it comes this close to a whole number of set periods after
#: the last write, s (the control ticks' jitter; see :meth:`MotorIO._ride`).
RIDE_TOLERANCE_S = 0.005


def duty_refresh_s(motor_cfg: object) -> float:
    """How often to write an unchanged duty to the controller of ``motor_cfg``, s.

    At most :data:`DUTY_REFRESH_S`, and at least :data:`REFRESHES_PER_TIMEOUT` writes per period of
    the controller's own stop timeout when it has one (its driver's
    :meth:`drivers.base.MotorController.own_timeout_s`).
    """
    timeout = driver_class(motor_cfg).own_timeout_s(motor_cfg)
    return DUTY_REFRESH_S if not timeout else min(DUTY_REFRESH_S, timeout / REFRESHES_PER_TIMEOUT)


def rest_period_s(motor_cfg: object) -> float:
    """Period of the feedback sets and of the zero duty's rewrite while the tank is at rest, s.

    :data:`REST_PERIOD_S`, and when the controller has its own stop timeout (its driver's
    :meth:`drivers.base.MotorController.own_timeout_s`) short enough that a rewrite due every
    ``(timeout - TICK_ALLOWANCE_S) / REST_WRITES_PER_TIMEOUT`` still reaches it
    :data:`REST_WRITES_PER_TIMEOUT` times per timeout although it waits for the next tick (only a
    duty write feeds the line firmware's watchdog: docs/line-protocol.md); never shorter than the
    moving refresh (:func:`duty_refresh_s`). A 0.5 s timeout gives 0.15 s; the 0.1 s minimum gives
    the moving refresh.
    """
    timeout = driver_class(motor_cfg).own_timeout_s(motor_cfg)
    rest = REST_PERIOD_S if not timeout else min(REST_PERIOD_S,
                                                 (timeout - TICK_ALLOWANCE_S) / REST_WRITES_PER_TIMEOUT)
    return max(rest, duty_refresh_s(motor_cfg))


class MotorIO:
    """Duty writes and feedback reads of one motor controller on its own thread; see the module docstring.

    Args:
        motor: the supervised controller; its calls never raise.
        feedback_hz: feedback sets read per second (a set is several transactions).
        on_feedback: called on the worker thread with each new feedback (status logging).
        refresh_s: a posted duty equal to the last one acknowledged by the same driver is not
            written again until this long after that write (:func:`duty_refresh_s`).
        rest_s: the period of feedback sets and of the zero duty's rewrite at rest (see the module
            docstring; :func:`rest_period_s`); None: no rest, the full rate always.
        on_rest_end: called on the worker thread when a rest ends (the I2C buses read the IMU at once:
            agent/devices/i2cbus.py ``I2cBusIO.hurry``); must not block.
        zero_at_open: ``motor``'s ``on_open`` writes a zero duty: a reopen acknowledges it, and the
            zero is written every ``refresh_s`` until the first post (see the module docstring).
        clock: monotonic clock, s (for the refresh and the feedback rate).

    Attributes:
        resting: the tank is at rest (read and written at ``rest_s``); the worker thread's view.
    """

    def __init__(self, motor: Supervised[MotorController], *, feedback_hz: float,
                 on_feedback: Callable[[MotorFeedback], None] | None = None,
                 refresh_s: float = DUTY_REFRESH_S, rest_s: float | None = None,
                 on_rest_end: Callable[[], None] | None = None, zero_at_open: bool = False,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.motor = motor
        self._refresh_s = refresh_s
        self._rest_s = rest_s
        self._fast_s = 1.0 / feedback_hz
        self._clock = clock
        self._still_since: float | None = None   # since when the zero duty is acked and the tracks read still
        self._on_rest_end = on_rest_end
        self.resting = False
        self._last: tuple[Duty, float, object] | None = None   # duty, when, driver of the last acked write
        self._on_feedback = on_feedback
        self.acked = True                     # the last duty write was acknowledged
        self.feedback: MotorFeedback | None = None
        #: (feedback, (start, end)): the newest feedback with the ``clock`` span of the set that read it,
        #: published as one value (the control thread bounds an encoder delta by the time between reads)
        self.timed: tuple[MotorFeedback | None, tuple[float, float] | None] = (None, None)
        self.writes = 0
        self.sets = 0                         # feedback sets read
        self.skipped = 0                      # posted duties not written: unchanged and written lately
        self._poll = Poll(self._read, self._fast_s)
        self._set_at = -math.inf              # when the last feedback set began
        self._zero_at_open = zero_at_open
        self._failed_driver: object = None    # the driver (None: none open) of the last failed write
        self._posted = not zero_at_open       # a duty was posted (the control loop ticks): no keepalive
        polls = [Poll(self._keepalive, refresh_s), self._poll] if zero_at_open else [self._poll]
        self.worker = DeviceWorker("motor", [motor], serve=self._serve, polls=polls, clock=clock)

    def start(self) -> None:
        """Start the thread (once)."""
        self.worker.start()

    def post(self, left: float, right: float, *, force: bool = False) -> bool:
        """Queue (left, right) duty for the worker (latest wins); returns whether the last write was
        acknowledged (or, with ``zero_at_open``, the controller was reopened since it failed).

        Never blocks on the controller. False while the controller is lost. A duty equal to the
        last one acknowledged, its refresh not yet due, with nothing else posted or being written,
        is counted as skipped here and does not wake the thread (the control loop posts every tick);
        ``force``: written all the same (the closing zero, whose answer is awaited: agent.control.devices).
        """
        self._posted = True
        if not force and self.worker.idle() and self._fresh((left, right)):   # idle first: then _last is final
            self.skipped += 1
        else:
            self.worker.post("duty", ((left, right), force))
        driver = self.motor.driver
        reopened = self._zero_at_open and driver is not None and driver is not self._failed_driver
        return (self.acked or reopened) and self.motor.state != LOST

    def settle(self, timeout_s: float) -> bool:
        """Wait until every duty posted so far was written; True when done in time and the last was acknowledged."""
        return self.worker.settle(timeout_s) and self.acked

    def close(self, timeout_s: float = 3.0) -> None:
        """Stop the thread (a write in progress finishes). Idempotent."""
        self.worker.close(timeout_s)

    # ------------------------------------------------------------------ the thread
    def _take(self) -> tuple[Duty, int] | None:
        """The pending duty and its post count, or None: none, or unchanged and written lately (then
        done at once)."""
        taken = self.worker.take()
        if taken is None:
            return None
        (duty, force), serial = taken[0]["duty"], taken[1]
        if not force and self._fresh(duty):
            self.skipped += 1
            self.worker.finish(serial)
            return None
        return duty, serial

    def _fresh(self, duty: Duty) -> bool:
        """``duty`` is the last one the current driver acknowledged, less than ``refresh_s`` ago."""
        last = self._last
        if last is None or last[0] != duty or last[2] is not self.motor.driver:
            return False
        if self.resting and self._rest_s is not None:   # the control loop's rest ticks come every rest_s:
            return self._clock() - last[1] < self._rest_s * REST_TICK_SHARE    # each one rewrites the zero
        return self._clock() - last[1] < self._refresh_s - TICK_JITTER_S

    def _written(self, duty: Duty, serial: int, ok: bool, driver: object, count: int = 1) -> None:
        self.acked = ok
        if not ok:
            self._failed_driver = driver
        self.writes += count
        self._last = (duty, self._clock(), driver) if ok else None
        if not ok or duty != (0.0, 0.0):
            self._wake_up()
        self.worker.finish(serial)

    def _wake_up(self) -> None:
        """End the rest (worker thread): the next feedback set is due within the full-rate period."""
        self._still_since = None
        if self.resting:
            self.resting = False
            due = self._clock() + self._fast_s
            if self._poll.due is not None and self._poll.due > due:
                self._poll.due = due
            if self._on_rest_end is not None:
                self._on_rest_end()

    def _still(self, fb: MotorFeedback | None, before: MotorFeedback | None) -> bool:
        """The zero duty is the last one this driver acknowledged and ``fb`` shows the tracks still
        and nothing amiss: counts unchanged since ``before``, speeds zero, currents under
        :data:`REST_CURRENT_A`, status clear (a field the controller does not report is no objection)."""
        last = self._last
        if fb is None or before is None or last is None or last[0] != (0.0, 0.0) or last[2] is not self.motor.driver:
            return False
        if (fb.left_counts, fb.right_counts) != (before.left_counts, before.right_counts):
            return False
        if any(v is not None and v != 0 for v in (fb.left_cps, fb.right_cps, fb.status)):
            return False
        return all(a is None or abs(a) < REST_CURRENT_A for a in (fb.left_a, fb.right_a))

    def _rest_after(self, fb: MotorFeedback | None, before: MotorFeedback | None) -> float | None:
        """Update the rest from the set just read; the period until the next set (None: the full rate)."""
        if self._rest_s is None:
            return None
        if not self._still(fb, before):
            self._wake_up()
            return None
        now = self._clock()
        if self._still_since is None:
            self._still_since = now
        self.resting = now - self._still_since >= REST_AFTER_S
        return max(self._rest_s, self._fast_s) if self.resting else None

    def _keepalive(self) -> float:
        """Before the first post: write the zero duty when its refresh is due (see the module docstring).
        Returns the period until the next (inf once a duty was posted)."""
        if self._posted:
            return math.inf
        driver = self.motor.driver
        if driver is not None and not self._fresh((0.0, 0.0)):
            ok = bool(self.motor.call(lambda d: (d.set_duty(0.0, 0.0), True)[1], default=False))
            self._written((0.0, 0.0), 0, ok, driver)
        return self._refresh_s

    def _serve(self) -> None:
        """A posted duty goes out before anything else."""
        taken = self._take()
        if taken is not None:
            driver = self.motor.driver
            last = self._last
            ok = bool(self.motor.call(lambda d: (d.set_duty(taken[0][0], taken[0][1]), True)[1], default=False))
            self._written(*taken, ok, driver)
            if ok and last is not None and last[0] == taken[0] and last[2] is driver:
                self._ride(last[1])

    def _ride(self, before: float) -> None:
        """After the rewrite of an unchanged duty (a refresh, a rest tick's zero): a feedback set due
        within ``early`` (:data:`RIDE_SHARE` of its period) runs now, in this wake-up, instead of
        waking the thread again a few ms later; one that ran less than ``early`` before it moves the
        next set to a period after it (once: the rewrites come at the control ticks, every 0.1 s
        moving, every rest period at rest, so the sets then keep riding along: two sets per refresh,
        one per rest tick, the mean set period unchanged). Only when this rewrite came a whole number
        of set periods after the last write (``before``), within :data:`RIDE_TOLERANCE_S`: rewrites
        at another period (a shorter refresh, ticks that do not divide it) would make sets more
        frequent or rarer. No two sets come more than 1.5 periods and :data:`RIDE_LAG_S` apart, at
        rest never more than :data:`REST_PERIOD_S`; a duty change (not a rewrite) moves nothing."""
        poll, now = self._poll, self._clock()
        if poll.due is None:
            return
        period = max(self._rest_s, self._fast_s) if self.resting and self._rest_s is not None else self._fast_s
        whole = round((now - before) / period)
        if whole < 1 or abs(now - before - whole * period) > RIDE_TOLERANCE_S:
            return
        early = period * RIDE_SHARE
        if poll.due - now <= early:
            resting = self.resting
            nxt = self._read()
            step = self._fast_s if nxt is None else nxt
            if self.resting != resting:             # the rest ended or began here: its period as it is
                poll.due = now + step
            else:                                   # at rest never more than 0.25 s apart
                poll.due = now + (min(step + RIDE_LAG_S, max(step, REST_PERIOD_S)) if self.resting
                                  else step + RIDE_LAG_S)
        elif now - self._set_at <= early and (not self.resting or now + period + RIDE_LAG_S - self._set_at
                                              <= REST_PERIOD_S):     # at rest never more than 0.25 s apart
            poll.due = now + period + RIDE_LAG_S

    def _read(self) -> float | None:
        """One feedback set; a duty posted meanwhile goes out before the set's next transaction.
        Returns the period until the next set (None: ``1 / feedback_hz``; longer at rest)."""
        taken: list[tuple[Duty, int]] = []
        driver = self.motor.driver
        self._set_at = self._clock()
        self.sets += 1

        def between() -> Duty | None:
            got = self._take()
            if got is None:
                return None
            taken.append(got)
            return got[0]

        fb = self.motor.call(lambda d: d.read_feedback(between) if d.duty_may_slip else d.read_feedback())
        if taken:       # written inside the set: acknowledged when the whole read succeeded
            self._written(*taken[-1], fb is not None, driver, count=len(taken))
        self.timed = (fb, None if fb is None else (self._set_at, self._clock()))
        before, self.feedback = self.feedback, fb      # None while lost or failing: never a stale value
        if fb is not None and self._on_feedback is not None:
            self._on_feedback(fb)
        return self._rest_after(fb, before)
