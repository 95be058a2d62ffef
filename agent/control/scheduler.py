"""When the control loop ticks: the control thread, its wake-ups and its timing figures.

:class:`Scheduler` runs a tick function on its own thread at fixed-rate slots
(``1 / rate_hz``), timed with the injected monotonic clock and waiting on an
abortable wait (:class:`Bell`). A late tick skips the missed slots instead of
bursting to catch up. Besides the slots it wakes

- at the deadline of the velocity command driving a channel when that falls
  between two slots, and runs one extra tick then, so the watchdog's zero
  reaches the motor right after the timeout rather than up to a tick later;
- at once when :meth:`Scheduler.wake` is called (a new velocity command, a
  ``Stop``, the release of a driving source): wake-ups are coalesced (any number
  of calls before the tick runs give one tick) and kept at least
  ``MIN_WAKE_SPACING_S`` after the previous *woken* tick (a command right after a
  slot tick is not held back: that wait was the p99 of the command path,
  scripts/bench_latency_stages.py); a woken tick restarts the slot
  grid (the next slot is one period after it), so a command stream faster than
  ``rate_hz`` ticks at the stream's rate (at most ``1 / MIN_WAKE_SPACING_S``),
  never at stream rate plus slot rate.

At rest (agent/control/rest.py) the slots come every :meth:`Scheduler.rest` period instead of
``1 / rate_hz``; :meth:`Scheduler.rouse` wakes a tick at once only then (what need not run
a tick at the full rate: a joint command, the end of the motor line's rest). The tick that ends
the rest sets the full period again before the next slot is placed.

A tick that raises is logged (rate-limited) and followed by the ``recover``
call (zero the tracks); the thread carries on. The same timing path serves
:meth:`Scheduler.tick` for tests that drive time themselves.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Generic, NamedTuple, TypeVar

T = TypeVar("T")

from agent.support.ratelimit import RateLimitedLog
from agent.support.threadprio import control_thread

log = logging.getLogger(__name__)

#: Window of :meth:`Scheduler.keeps_rate`, s, and the share of ``rate_hz`` it must reach.
RATE_WINDOW_S = 1.0
RATE_SHARE = 0.8
#: A tick that keeps failing is logged at most this often, s.
TICK_ERROR_LOG_INTERVAL_S = 5.0
#: Least time between a tick and a tick woken by :meth:`Scheduler.wake`, s (caps woken ticks at 200 Hz).
MIN_WAKE_SPACING_S = 0.005


class Bell:
    """A wake-up flag the control thread waits on: :class:`threading.Event`'s ``set`` / ``is_set`` /
    ``clear`` / ``wait``, with a wait that is one C call (a lock held while no ring is pending, released
    by :meth:`set`) instead of a Condition's waiter lock, allocated, queued and dropped at every wait.

    A :meth:`wait` may return early with the flag clear (a ring that came before a :meth:`clear`): the
    scheduler checks the clock after every wait, so an early return only costs one more loop pass.
    Thread-safe: any thread may :meth:`set`; one thread waits.
    """

    def __init__(self) -> None:
        self._flag = False
        self._ring = threading.Lock()
        self._ring.acquire()        # held: nothing pending

    def set(self) -> None:
        """Raise the flag and wake the waiter (or the next :meth:`wait`)."""
        self._flag = True
        try:
            self._ring.release()
        except RuntimeError:        # released already: a ring is pending
            pass

    def is_set(self) -> bool:
        """True while the flag is up."""
        return self._flag

    def clear(self) -> None:
        """Lower the flag (a :meth:`set` after this call raises it again)."""
        self._flag = False
        self._ring.acquire(False)   # take a pending ring: the next wait waits

    def wait(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s``, s, for :meth:`set`; returns the flag."""
        if not self._flag:
            self._ring.acquire(True, max(timeout_s, 0.0))
        return self._flag


class TickStats(NamedTuple):
    """Loop timing: ticks run; late ticks (started over half a period after their slot, or overran
    into the next slot); longest tick, s; rate over the last ~1 s, Hz; ticks run by wake(); the
    loop is at rest (slots every rest period: agent/control/rest.py)."""

    ticks: int
    late_ticks: int
    max_tick_s: float
    achieved_hz: float
    woken_ticks: int = 0
    resting: bool = False


class Scheduler(Generic[T]):
    """The control thread; see the module docstring.

    Args:
        tick: runs one iteration at the given time, s.
        recover: called after a tick raised (commands zero); must not raise.
        deadline: earliest deadline, s, of the velocity commands driving at the given time, or None.
        rate_hz: slot rate, Hz.
        clock: monotonic clock, s.
    """

    def __init__(self, tick: Callable[[float], T], recover: Callable[[], None],
                 deadline: Callable[[float], float | None], *, rate_hz: float,
                 clock: Callable[[], float]) -> None:
        self._tick = tick
        self._recover = recover
        self._deadline = deadline
        self._rate_hz = rate_hz
        self._period = 1.0 / rate_hz
        self._slot_s = self._period      # the slots' period now: 1 / rate_hz, or the rest period
        self._clock = clock
        self._halt = threading.Event()
        self._wake = Bell()               # set by wake() and stop(): tick now
        self._roused = False              # rouse() was called since the running tick began
        self._thread: threading.Thread | None = None
        self._ident: int | None = None    # the control thread's ident while its loop runs
        self._errors = RateLimitedLog(log, TICK_ERROR_LOG_INTERVAL_S)
        self._ticks = 0
        self._late = 0
        self._max_tick_s = 0.0
        self._tick_times: deque[tuple[float, float]] = deque(maxlen=int(rate_hz * RATE_WINDOW_S * 2) + 8)
        self._first_tick: float | None = None
        self._last_woken = -math.inf     # clock time the last woken tick started, s
        self.woken = 0                   # ticks run because of wake()
        #: called on the control thread after a tick woken at rest ran (ControlLoop.on_rouse); must not block
        self.on_roused: Callable[[], None] = lambda: None

    # ================================================================== control
    def start(self) -> None:
        """Start the control thread (once)."""
        if self._thread is not None:
            raise RuntimeError("control loop already started")
        self._thread = threading.Thread(target=self._run, name="control", daemon=True)
        self._thread.start()
        log.info("control loop running at %.0f Hz", self._rate_hz)

    def running(self) -> bool:
        """True while the control thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def on_thread(self) -> bool:
        """True when called on the control thread, from its loop (its ticks; not :meth:`tick`'s caller)."""
        return threading.get_ident() == self._ident

    def wake(self) -> None:
        """Run a tick now instead of at the next slot (thread-safe)."""
        self._wake.set()

    def rest(self, period_s: float | None) -> None:
        """Place the slots every ``period_s``, s, from the next one on (None: every ``1 / rate_hz``).
        Called by the tick, on the control thread (or the caller of :meth:`tick`).

        A :meth:`rouse` that came while the tick that begins a rest ran (after the tick read the
        state, before this call) found the full rate and woke nothing: a tick is woken now, so that
        command waits no rest period."""
        beginning = period_s is not None and self._slot_s == self._period
        self._slot_s = self._period if period_s is None else period_s
        if beginning and self._roused:
            self._wake.set()

    def resting(self) -> bool:
        """True while the slots come slower than ``rate_hz`` (the loop rests)."""
        return self._slot_s != self._period

    def rouse(self) -> None:
        """Run a tick now if the loop rests; at the full rate the next slot serves (thread-safe)."""
        self._roused = True     # read by rest(): the tick running now may be the one that begins a rest
        if self._slot_s != self._period:
            self._wake.set()

    def tick(self, now: float) -> T:
        """Run exactly one timed iteration at ``now`` on the caller's thread; returns the tick's result.

        Raises:
            RuntimeError: the control thread runs.
        """
        if self.running():
            raise RuntimeError("tick() called while the control thread runs")
        return self._timed(now)

    def stop(self, timeout_s: float) -> None:
        """Stop the thread and wait up to ``timeout_s`` for it (idempotent)."""
        self._halt.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.error("control thread did not stop within %.1f s", timeout_s)

    # ================================================================== the thread
    def _run(self) -> None:
        control_thread()        # ahead of the machine's other threads where permitted (agent.support.threadprio)
        self._ident = threading.get_ident()
        try:
            self._loop()
        finally:
            self._ident = None

    def _loop(self) -> None:
        slot = self._clock()
        served = None           # the deadline the last extra tick was run for (never twice)
        while not self._halt.is_set():
            now = self._clock()
            expiry = self._deadline(now)
            wake = slot if expiry is None or expiry == served else min(slot, expiry)
            if now < wake:
                self._wake.wait(wake - now)
                if self._halt.is_set():
                    break
                if self._wake.is_set():     # a command, stop or release: apply it without waiting for the slot
                    rested = self._slot_s != self._period
                    now = self._woken_tick()
                    if now is None:
                        break
                    if rested:              # its snapshot is out: pollers waiting for the next rest tick look now
                        self.on_roused()
                    slot = now + self._slot_s     # the tick set the period: a command ends a rest
                    continue
                now = self._clock()
                if now < wake:
                    continue
            if now < slot:      # a driving command's deadline fell between slots: zero it now
                served = expiry
                self._safe_tick(now)
                continue
            period = self._slot_s
            late = now - slot > period / 2
            self._safe_tick(now)
            period = self._slot_s           # a rest began or ended at this tick: the next slot at the new period
            slot += period
            after = self._clock()
            if after >= slot:  # overran: skip the missed slots rather than burst
                slot += (math.floor((after - slot) / period) + 1) * period
                late = True
            self._late += late

    def _woken_tick(self) -> float | None:
        """Run the tick ``wake()`` asked for, at least ``MIN_WAKE_SPACING_S`` after the last woken one; its time,
        or None on halt."""
        gap = self._last_woken + MIN_WAKE_SPACING_S - self._clock()
        if gap > 0 and self._halt.wait(gap):
            return None
        self._wake.clear()      # wake() calls from here on ask for the next tick
        now = self._last_woken = self._clock()
        self.woken += 1
        self._safe_tick(now)
        return now

    def _safe_tick(self, now: float) -> None:
        self._wake.clear()      # this tick applies every command submitted so far
        self._roused = False
        try:
            self._timed(now)
        except Exception:  # the loop must outlive any bug in one tick
            # rate-limited: a bug that fails every tick would otherwise log 50 tracebacks a second
            self._errors.log(logging.ERROR, "tick", "control tick failed; commanding zero and carrying on",
                             exc_info=True)
            self._recover()

    def _timed(self, now: float) -> T:
        started = time.monotonic()
        result = self._tick(now)
        self._ticks += 1
        self._tick_times.append((now, self._slot_s))
        if self._first_tick is None:
            self._first_tick = now
        self._max_tick_s = max(self._max_tick_s, time.monotonic() - started)
        return result

    # ================================================================== timing
    def stats(self) -> TickStats:
        """(ticks, late_ticks, max_tick_s, achieved_hz); achieved over the last ~1 s."""
        return TickStats(self._ticks, self._late, self._max_tick_s, self._achieved_hz(), self.woken, self.resting())

    def _recent(self) -> tuple[float, list[tuple[float, float]]]:
        """(the window over the last ~1 s, s; the (tick time, slot period) of the ticks in it); (0.0, [])
        before the first tick."""
        if self._first_tick is None:
            return 0.0, []
        now = self._clock()
        window = min(RATE_WINDOW_S, now - self._first_tick + self._period)
        if window <= 0:
            return 0.0, []
        return window, [(t, p) for t, p in list(self._tick_times) if t > now - window]

    def _achieved_hz(self) -> float:
        window, ticks = self._recent()
        return len(ticks) / window if window > 0 else 0.0

    def _covered(self) -> float:
        """Share of the last ~1 s that ticks served: each tick covers the slot period in force when it ran
        (a rest tick its rest period), so 1.0 at either rate."""
        window, ticks = self._recent()
        return sum(p for _, p in ticks) / window if window > 0 else 0.0

    def keeps_rate(self) -> bool:
        """True while the thread runs and the last ~1 s achieved >= 80 % of its slots (``rate_hz``, or the
        rest period's rate while the loop rests)."""
        return self.running() and self._covered() >= RATE_SHARE
