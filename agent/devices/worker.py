"""One device thread: posted values first (latest wins), periodic polls when due, lost devices reopened.

:class:`DeviceWorker` is the thread every device I/O path runs on (the motor
controller, agent/devices/motorio.py; one per I2C bus, agent/devices/i2cbus.py). The
caller posts values (:meth:`DeviceWorker.post`: never blocks; a newer value for the same
key replaces one not yet served) and the worker hands them to its ``serve`` function before
anything else; between posts it runs each :class:`Poll` when due, and reopens each of its
supervised devices that is ``lost`` when its backoff expires
(:meth:`agent.devices.supervisor.Supervised.reopen_in`), on this same thread: the
transactions of one line or bus never interleave.

The thread sleeps until a value is posted, a poll is due or a reopen is due: an idle worker
wakes only at its polls' rates (no periodic timeout of its own), and one without polls and
with its devices open never wakes at all. A poll with an ``early_s`` allowance runs along when
the thread is awake anyway (it served a post or ran another poll) and the poll is due within
``early_s``: one wake-up instead of two a little apart (the I2C bus's power monitor and servo
check with the IMU's reads, agent/devices/i2cbus.py). Early runs never make a poll's runs rarer:
see :class:`Poll`.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Protocol

__all__ = ["DeviceWorker", "Poll", "Reopenable"]


class Reopenable(Protocol):
    """A device a worker reopens: :class:`agent.devices.supervisor.Supervised`, or a camera's capture run."""

    def reopen_in(self) -> float | None:
        """Seconds until its reopen is due (0.0: now), or None while it is open."""

    def try_open(self) -> bool:
        """Open it now (blocking); True on success, else the next attempt is scheduled."""


class Poll:
    """A periodic job of a :class:`DeviceWorker`.

    Args:
        run: called on the worker thread when due; returns the period until the next run, s
            (None: ``period_s``). A sensor returns a longer period while its driver buffers samples.
        period_s: the period, s; the first run is due at once, then one every period from when
            it was due (a late run does not shift the rate; runs missed are not made up).
        pause: the period is a pause to keep between the end of a run and the next (a chip's
            sample period between two reads of a calibration), not a rate.
        early_s: while the thread is awake anyway (it served a post or ran another poll in this
            wake-up), the run may come up to this long before it is due instead of waking the
            thread again at its due time, s (0: never early). Its grid stays: the next run is due
            one period after the due time this run had, so the mean rate is unchanged and no two
            runs are further apart than one period plus ``early_s``.

    Attributes:
        due: when the next run is due on the worker's clock, s (None: at once; inf: not until
            moved). Its owner may move it, on the worker's thread only (from ``serve``, a poll or
            ``on_reopen``): e.g. a calibration started, a camera reopened.
    """

    __slots__ = ("run", "period_s", "pause", "due", "early_s")

    def __init__(self, run: Callable[[], float | None], period_s: float, *, pause: bool = False,
                 early_s: float = 0.0) -> None:
        self.run = run
        self.period_s = period_s
        self.pause = pause
        self.early_s = early_s
        self.due: float | None = None     # None: at once


class DeviceWorker:
    """One thread serving posted values, polls and reopens of some devices.

    Args:
        name: the thread's name (``motor``, ``i2c-/dev/i2c-1``).
        devices: the devices this thread reopens when lost (:class:`Reopenable`).
        serve: called on the thread while values are pending; takes them with :meth:`take` and
            reports each batch served with :meth:`finish` (for :meth:`settle`).
        polls: periodic jobs, run one at a time between posts.
        on_reopen: called on the thread with a device just reopened (write again what it lost).
        on_start / on_exit: called on the thread first (e.g. lower its priority) and last, however
            it ends (e.g. release what a replaced thread still holds).
        clock: monotonic clock of the polls' due times, s.
    """

    def __init__(self, name: str, devices: Sequence[Reopenable], *, serve: Callable[[], None] | None = None,
                 polls: Sequence[Poll] = (), on_reopen: Callable[[Any], None] | None = None,
                 on_start: Callable[[], None] | None = None, on_exit: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.devices = tuple(devices)
        self.polls = list(polls)
        self._serve = serve
        self._on_reopen = on_reopen
        self._on_start = on_start
        self._on_exit = on_exit
        self._clock = clock
        self._cond = threading.Condition()
        self._pending: dict[Hashable, Any] = {}
        self._posted = 0          # posts so far
        self._done = 0            # the _posted count of the last batch served
        self._stop = False
        self.wakeups = 0          # times the thread woke (a post, a poll or reopen due, close)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    # ------------------------------------------------------------------ callers
    def start(self) -> None:
        """Start the thread (once)."""
        self._thread.start()

    @property
    def alive(self) -> bool:
        """The thread runs (started and not ended)."""
        return self._thread.is_alive()

    @property
    def stopping(self) -> bool:
        """:meth:`close` was called."""
        return self._stop

    def post(self, key: Hashable, value: Any) -> None:
        """Queue ``value`` under ``key`` (a newer value replaces one not yet taken). Never blocks on I/O."""
        with self._cond:
            self._pending[key] = value
            self._posted += 1
            self._cond.notify_all()

    def idle(self) -> bool:
        """Every value posted so far was served (none pending, none being served)."""
        with self._cond:
            return self._done >= self._posted

    def wake(self) -> None:
        """Make the thread look at its polls again now (a poll's due time was moved earlier)."""
        with self._cond:
            self._cond.notify_all()

    def settle(self, timeout_s: float) -> bool:
        """Wait until every value posted so far was served; False when late or the thread is gone."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._done < self._posted and not self._stop:
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    return False
                self._cond.wait(left)
            return self._done >= self._posted

    def close(self, timeout_s: float = 3.0) -> None:
        """Stop the thread (a call in progress finishes), waiting up to ``timeout_s`` (0: not at all). Idempotent."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    # ------------------------------------------------------------------ serve's side
    def take(self) -> tuple[dict[Hashable, Any], int] | None:
        """The pending values (cleared) and the post count they cover, or None when none are pending."""
        with self._cond:
            if not self._pending:
                return None
            pending, self._pending = self._pending, {}
            return pending, self._posted

    def finish(self, serial: int) -> None:
        """Values taken with post count ``serial`` were served (written, or dropped as not needed)."""
        with self._cond:
            self._done = max(self._done, serial)
            self._cond.notify_all()

    # ------------------------------------------------------------------ the thread
    def _due_in(self, awake: bool = False) -> float:
        """Seconds until the next poll or reopen is due (0: now; inf: none); ``awake``: a poll within
        its ``early_s`` counts as due now."""
        now = self._clock()
        soonest = math.inf
        for p in self.polls:
            if p.due is None:
                return 0.0
            left = p.due - now
            if awake and left <= p.early_s:
                return 0.0
            if left < soonest:
                soonest = left
        for d in self.devices:
            w = d.reopen_in()
            if w is not None and w < soonest:
                soonest = w
        return max(0.0, soonest)

    def _run(self) -> None:
        try:
            if self._on_start is not None:
                self._on_start()
            self._loop()
        finally:
            if self._on_exit is not None:
                self._on_exit()

    def _loop(self) -> None:
        awake = False       # this wake-up did work: polls within their early_s may run along
        while True:
            with self._cond:
                while not self._stop and not self._pending and (wait := self._due_in(awake)) > 0:
                    awake = False
                    self._cond.wait(None if wait == math.inf else wait)
                    self.wakeups += 1
                if self._stop:
                    return
                posted = bool(self._pending)
            awake = True
            if posted:
                if self._serve is not None:
                    self._serve()
                elif (taken := self.take()) is not None:    # nothing to serve them: done
                    self.finish(taken[1])
                continue
            self._reopen_due()
            self._poll_due()

    def _reopen_due(self) -> None:
        for dev in self.devices:
            if dev.reopen_in() == 0.0 and dev.try_open() and self._on_reopen is not None:
                self._on_reopen(dev)

    def _poll_due(self) -> None:
        """Run the first due poll, or else the first within its ``early_s`` (the thread is awake: it
        did work in this wake-up); posts go first again before the next."""
        started = self._clock()
        early = None
        for poll in self.polls:
            due = poll.due
            if due is None or due <= started:
                self._run_poll(poll, started, due)
                return
            if early is None and due - poll.early_s <= started:
                early = poll
        if early is not None:
            self._run_poll(early, started, early.due)

    def _run_poll(self, poll: Poll, started: float, due: float | None) -> None:
        period = poll.run()
        step = poll.period_s if period is None else period
        if poll.pause:
            poll.due = self._clock() + step
        else:
            poll.due = started + step if due is None else max(due + step, started)
