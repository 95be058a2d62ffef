"""The e-stop input: a normally-closed switch watched on its own thread (docs/safety.md "E-stop input").

:class:`EstopDebounce` is the rule, pure and clocked by its caller:

- the circuit open, or the line unreadable (chip removed, read error, device lost or
  never opened) sets the input's e-stop at once, on the first such reading;
- the circuit closed without a break for ``debounce_s`` releases it; any open reading
  (a bouncing contact, a flapping wire) starts the wait again, so a flapping line sets
  the e-stop once and holds it until the line has been steady;
- the input releases only the e-stop it set: a console or CLI e-stop has its own setter
  and needs its own release;
- while the input holds (open, unreadable, or closed for less than ``debounce_s``) nobody
  else may release the e-stop: the latch asks :meth:`EstopWatch.holding_reason` and refuses
  the release with it (``SafetyLatches.hold_while``); should the e-stop be found released all
  the same, the input sets it again at its next reading.

:class:`EstopWatch` runs it: a thread (never the event loop) that waits for an edge
of the line or ``1 / poll_hz`` s, whichever comes first, reads the line through
its :class:`agent.devices.supervisor.Supervised` driver and acts on the verdicts through an
:class:`EstopSink` (:class:`LoopEstop`: the control loop's ``estop("input", reason)``,
and the release under the loop's lock only while the e-stop is the input's). Opening
therefore reaches the control loop within one poll period, or at once with edge
events, and the control loop, woken, writes zero duty in the tick it runs at once. A sink that
raises is logged; the watch goes on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from agent.support.ratelimit import RateLimitedLog
from agent.devices.supervisor import Supervised
from drivers.base import SwitchInput

log = logging.getLogger(__name__)

#: Set / release verdicts of :meth:`EstopDebounce.update`.
SET, RELEASE = "set", "release"

#: The circuit's changes are logged at most this often, s (a flapping wire changes it per edge).
CHANGE_LOG_S = 1.0

#: The e-stop setter name of the input (agent.control.safety.ESTOP_SETTERS).
BY = "input"

#: A wait for an edge longer than this is taken in pieces of it, s, so :meth:`EstopWatch.close` is
#: seen within it even when the backup reads are seconds apart (no extra reading is taken).
WAIT_PIECE_S = 0.5


class EstopSink(Protocol):
    """Where the input's verdicts go."""

    def set(self, reason: str) -> None:
        """Set the e-stop as the input, with ``reason``."""

    def holder(self) -> str | None:
        """Who holds the e-stop now (``input``, ``console``, ``cli``), or None when none is set."""

    def release(self) -> bool:
        """Release the e-stop if the input holds it; True when released."""

    def hold(self, why: Callable[[], str | None]) -> None:
        """Refuse anyone else's release while ``why()`` gives a reason (called under the sink's lock)."""


class LoopEstop:
    """:class:`EstopSink` on a :class:`agent.control.ControlLoop` (its e-stop API, docs/safety.md)."""

    def __init__(self, loop: Any) -> None:
        self._loop = loop

    def set(self, reason: str) -> None:
        self._loop.estop(BY, reason)

    def holder(self) -> str | None:
        with self._loop.locked():
            halt = self._loop.safety.state().estop
        return None if halt is None else halt.by

    def release(self) -> bool:
        # never a console's or CLI's e-stop; through the front, so the kept e-stop file is updated too
        return self._loop.release_own_estop(BY)

    def hold(self, why: Callable[[], str | None]) -> None:
        with self._loop.locked():
            self._loop.safety.hold_while(BY, why)


class EstopDebounce:
    """Open sets at once, a steady close releases (module docstring). Not thread-safe: one caller.

    Args:
        debounce_s: how long the circuit must read closed without a break before release, s.

    Attributes:
        active: True while the input holds its e-stop.
    """

    def __init__(self, debounce_s: float) -> None:
        self.debounce_s = debounce_s
        self.active = False
        self._closed_since: float | None = None

    def update(self, closed: bool | None, now: float) -> str | None:
        """Feed one reading (True closed, False open, None unreadable) taken at ``now`` (s, monotonic).

        Returns:
            ``"set"`` when the input's e-stop must be set now, ``"release"`` when it must be
            released now, else None.
        """
        if not closed:
            self._closed_since = None
            if not self.active:
                self.active = True
                return SET
            return None
        if not self.active:
            return None
        if self._closed_since is None:
            self._closed_since = now
        if now - self._closed_since >= self.debounce_s:
            self.active = False
            self._closed_since = None
            return RELEASE
        return None

    def due_in(self, now: float) -> float | None:
        """Seconds until a steady close would release, or None when no release is pending."""
        if not self.active or self._closed_since is None:
            return None
        return max(0.0, self._closed_since + self.debounce_s - now)


class EstopWatch:
    """The e-stop input's thread; see the module docstring.

    Args:
        device: the supervised switch driver (``estop`` in device health).
        debounce_s: release debounce, s. poll_hz: reads per second without an edge.
        clock: monotonic clock, s.

    Attributes:
        debounce: the rule's state (``debounce.active``: the input holds its e-stop).
        last_closed: the last reading (True closed, False open, None unreadable).
        reads: readings taken so far.
    """

    def __init__(self, device: Supervised[SwitchInput], *, debounce_s: float, poll_hz: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.device = device
        self.period_s = 1.0 / poll_hz
        self.debounce = EstopDebounce(debounce_s)
        self._clock = clock
        self._sink: EstopSink | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="estop-input", daemon=True)
        self._changes = RateLimitedLog(log, CHANGE_LOG_S, clock=clock)
        self.last_closed: bool | None = None
        self.reads = 0

    def connect(self, sink: EstopSink) -> None:
        """Where the verdicts go (:class:`LoopEstop` on the control loop). Call before :meth:`start`."""
        with self._lock:
            self._sink = sink
        sink.hold(self.holding_reason)

    def holding_reason(self) -> str | None:
        """Why the input holds the e-stop now (its circuit open, unreadable, or not yet closed for
        ``debounce_s``), or None when it does not. Non-blocking: the e-stop latch asks it on a release."""
        if not self.debounce.active:
            return None
        if self.last_closed is None:
            return "its line is unreadable"
        if self.last_closed is False:
            return "its circuit is open (switch pressed or wire cut)"
        return f"its circuit has not yet read closed for {self.debounce.debounce_s:.2f} s"

    def start(self) -> None:
        """Adopt a kept e-stop of the input, take one reading now (an open or missing input holds the
        e-stop from the start), then watch."""
        self.adopt_kept()
        self.poll_once()
        self._thread.start()

    def adopt_kept(self) -> bool:
        """An e-stop the input set before a restart (put back by agent.ops.estopstore) is the input's again:
        the circuit reading closed for ``debounce_s`` releases it. True when one was adopted."""
        sink = self._sink_now()
        if sink is None or sink.holder() != BY:
            return False
        self.debounce.active = True
        log.warning("e-stop input: the e-stop kept across the restart was set by the input; it ends once "
                    "the circuit has read closed for %.2f s", self.debounce.debounce_s)
        return True

    def close(self) -> None:
        """Stop the thread (the device is closed by its owner). Idempotent."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.device.driver is None:      # lost: read as unreadable, reopened here after its backoff
                due = self.device.reopen_in()
                if due != 0.0:
                    self._stop.wait(self.period_s if due is None else min(due, self.period_s))
                if not self._stop.is_set() and self.device.reopen_in() == 0.0:
                    self.device.try_open()
            else:
                wait = self.period_s
                due = self.debounce.due_in(self._clock())
                if due is not None:
                    wait = min(wait, max(due, 0.001))
                self._wait_for_edge(wait)
            if not self._stop.is_set():
                self.poll_once()

    def _wait_for_edge(self, wait_s: float) -> None:
        """Block until an edge arrived, ``wait_s`` s passed or :meth:`close` was called."""
        deadline = time.monotonic() + wait_s
        while not self._stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:               # paused past the deadline: a sleep(negative) would raise
                return
            piece = min(left, WAIT_PIECE_S)
            if self.device.call(lambda d: d.wait(piece), default=None) is not False or left <= WAIT_PIECE_S:
                return

    def poll_once(self) -> None:
        """Read the line once and act on the verdict (the thread's step; tests call it directly)."""
        closed = self.device.call(lambda d: d.read(), default=None)
        self.reads += 1
        now = self._clock()
        verdict = self.debounce.update(closed, now)
        if closed != self.last_closed:
            self._changes.log(logging.INFO, "circuit", "e-stop input: circuit %s",
                              {True: "closed", False: "open"}.get(closed, "unreadable"))
            self.last_closed = closed
        if verdict == SET:
            self._emit_set(self._reason(closed))
        elif verdict == RELEASE:
            self._emit_release()
        elif self.debounce.active:
            self._reassert(closed)

    def _reason(self, closed: bool | None) -> str:
        if closed is False:
            return "e-stop input: circuit open (switch pressed or wire cut)"
        health = self.device.health()
        return f"e-stop input: line unreadable ({health.state}: {health.last_error or 'no reading'})"

    def _sink_now(self) -> EstopSink | None:
        with self._lock:
            return self._sink

    def _emit_set(self, reason: str) -> None:
        sink = self._sink_now()
        log.warning("%s: setting the e-stop", reason)
        if sink is not None:
            try:
                sink.set(reason)
            except Exception:  # noqa: BLE001 - the watch must go on
                log.exception("e-stop input: setting the e-stop failed")

    def _reassert(self, closed: bool | None) -> None:
        """The input holds: set the e-stop again if someone else released it meanwhile."""
        sink = self._sink_now()
        try:
            if sink is None or sink.holder() is not None:
                return
            reason = self._reason(closed) + " (set again: released while the input still held it)"
            log.warning("%s", reason)
            sink.set(reason)
        except Exception:  # noqa: BLE001 - the watch must go on
            log.exception("e-stop input: setting the e-stop again failed")

    def _emit_release(self) -> None:
        sink = self._sink_now()
        if sink is None:
            return
        try:
            released = sink.release()
        except Exception as err:  # noqa: BLE001 - e.g. released another way meanwhile
            log.info("e-stop input: release not applied: %s", err)
            return
        if released:
            log.warning("e-stop input: circuit closed for %.2f s: the input's e-stop released "
                        "(motion needs a fresh command)", self.debounce.debounce_s)
        else:
            log.info("e-stop input: circuit closed again; the e-stop now held is not the input's "
                     "(%s): it needs its own release", sink.holder() or "none")
