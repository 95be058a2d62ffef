"""One wake-up grid for the event loop's periodic work (issue 22, "Pi-core budget").

Every periodic sender on the event loop has its own period: robot_msg's RobotState at
``state_hz`` (50 Hz), Sim2Bot telemetry polls (30 Hz) and camera pacing (20 fps), ARTEX telem
(10 Hz) and video pacing, the console's camera pacing. Each on its own timer, the loop thread woke
for each of them apart: each wake-up an ``epoll_wait`` return, a pass of the loop and, on a busy
2-core machine, often a context switch. Their pauses end on one grid of ``SLOT_S`` instead, so the
work due within one slot runs in one wake-up: asyncio runs every timer due at the same instant in
one pass of its loop (``BaseEventLoop._run_once``).

- :func:`sleep` is a drop-in for ``asyncio.sleep``: a pause of at least one slot ends on the slot
  boundary nearest to the asked time (at most ``SLOT_S / 2`` early or late); a shorter one (drain
  polls, short waits) is not moved. A loop that schedules ``due += period`` keeps its average rate
  exactly; each of its wake-ups moves by at most half a slot.
- :func:`slot_index` gives a fixed-rate publisher (robot_msg at ``state_hz``) its own slots
  ``k / rate``: at 50 Hz those are the grid's boundaries (at 100 Hz every other one is).

- :class:`RestPolls` lets a poller of the control loop's snapshots skip the polls that cannot find a new
  one while the loop rests (a still tank's loop ticks every 0.15 s), and wakes it when a tick is
  woken at rest.

The grid is on the running loop's clock (``loop.time()``, ``time.monotonic``). Components whose
clock and sleep are injected (tests on :class:`agent.testing.clock.VirtualClock`) are not aligned.
"""

from __future__ import annotations

import asyncio
import math
from typing import TypeVar

__all__ = ["REST_MARGIN_S", "SLOT_S", "RestPolls", "nearest_slot", "sleep", "slot_index"]

T = TypeVar("T")

#: The grid's period, s: robot_msg's default RobotState period (50 Hz), a divisor of the
#: 10 Hz ARTEX telem period and near the 33 ms of Sim2Bot's 30 Hz telemetry.
SLOT_S = 0.02


def nearest_slot(t: float, slot_s: float = SLOT_S) -> float:
    """The slot boundary (a whole multiple of ``slot_s``) nearest to ``t``, s."""
    return math.floor(t / slot_s + 0.5) * slot_s


def slot_index(t: float, period_s: float) -> int:
    """The index ``k`` of the first boundary ``k * period_s`` after ``t`` (strictly later, whatever
    the rounding of ``t / period_s``: a publisher never gets its own slot again)."""
    k = math.floor(t / period_s) + 1
    return k if k * period_s > t else k + 1


def _wake(future: asyncio.Future, result: object) -> None:
    if not future.done():
        future.set_result(result)


async def sleep(delay: float, result: T = None) -> T:  # type: ignore[assignment]
    """Pause about ``delay`` s, ending on the grid; ``asyncio.sleep``'s signature and cancellation.

    A ``delay`` of at least :data:`SLOT_S` ends at :func:`nearest_slot` of ``loop.time() + delay``
    (never in the past: at least ``delay - SLOT_S / 2`` from now); a shorter one ends as asked.
    """
    if not delay >= SLOT_S:             # short, zero, negative or NaN: asyncio's own
        return await asyncio.sleep(delay, result)
    loop = asyncio.get_running_loop()
    future = loop.create_future()
    handle = loop.call_at(nearest_slot(loop.time() + delay), _wake, future, result)
    try:
        return await future
    finally:
        handle.cancel()


#: How long after a rest tick is due a poller looks for its snapshot, s: the tick's own work and a pause
#: that ends up to half a slot early (:func:`sleep`) still find the new snapshot there.
REST_MARGIN_S = SLOT_S


class RestPolls:
    """A snapshot poller that follows the control loop's rest (docs/safety.md, "The control loop at rest").

    While the newest snapshot says the loop rests (``Snapshot.resting``), no new one comes before the next
    rest tick (its stamp + ``robot.rest_period_s``, on the robot's clock): the polls of the poller's
    schedule before then would find nothing new and are skipped (:meth:`skip_to`); the next poll is in
    the grid's slot after that tick (every poller's in the same slot) and the schedule goes on from
    there, while a poll that must happen (a keepalive's, a settled value's) still happens at its time. A tick woken at rest (a command, a stop, the e-stop: agent.control.ControlLoop
    ``on_rouse``, called on the control thread after the tick published its snapshot) ends such a wait
    at once (:meth:`fire`): one cross-thread call per rouse, none while the tank moves or stands.

    Args:
        robot: the robot port; its ``rest_period_s`` (s, None: the loop never rests) and ``on_rouse`` are
            used where it has them (the control loop does).
        sleep: the poller's injected pause (tests), or None: waits end on the grid (:func:`sleep`) and a
            rouse cuts them short. An injected pause is not cut short (the rouse is noted, :attr:`roused`).

    Attributes:
        rest_s: the rest period, s, or None. skipped: polls skipped so far. roused: rouses that ended or
            came during a wait.
    """

    def __init__(self, robot: object, sleep: object = None) -> None:
        rest_s = getattr(robot, "rest_period_s", None)
        self.rest_s: float | None = rest_s if isinstance(rest_s, (int, float)) and rest_s > 0 else None
        self._injected = sleep
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiter: asyncio.Future | None = None
        self.skipped = self.roused = 0
        self.fires = 0              # rouses so far (the control thread adds one before it wakes the wait)
        self._noted = 0
        hook = getattr(robot, "on_rouse", None)
        if self.rest_s is not None and callable(hook):
            hook(self.fire)

    def note(self) -> None:
        """Call right before reading the snapshot a poll looks at: a rouse after this (its tick's snapshot
        perhaps not read) keeps the next poll on the schedule (:meth:`skip_to` skips nothing)."""
        self._noted = self.fires

    def skip_to(self, due: float, period: float, snap: object, limit: float = math.inf) -> tuple[float, int]:
        """The next poll, after a poll that read ``snap``, of a schedule whose next poll is at ``due`` (every
        ``period`` s): ``(due, 0)`` unless ``snap`` rests, else ``(at, polls skipped)``: ``at`` is the grid's
        slot at or after the next rest tick (+ :data:`REST_MARGIN_S`; the same slot for every poller, so
        they wake together), or the schedule's first poll at or after ``limit`` when that comes first (a
        keepalive's: kept as it was). The schedule goes on from ``at``."""
        rest = self.rest_s
        if rest is None or getattr(snap, "resting", None) is not True or self.fires != self._noted:
            return due, 0
        until = snap.t_mono_s + rest + REST_MARGIN_S    # type: ignore[attr-defined]
        if not min(until, limit) > due:
            return due, 0
        at = due + math.ceil((limit - due) / period - 1e-9) * period if limit < math.inf else math.inf
        if until < at:      # the grid's slot at or after it: every poller of the loop wakes in that one
            at = math.ceil(until / SLOT_S - 1e-9) * SLOT_S
        k = math.ceil((at - due) / period - 1e-9)      # the schedule's polls before it
        self.skipped += k
        return at, k

    def rests(self, snap: object, delay: float) -> bool:
        """True when a pause of ``delay`` s before a poll of the schedule (none skipped: the next rest tick comes
        first) follows a read of a resting ``snap``: it is waited for with :meth:`wait`, which a rouse ends,
        else a command at rest waits for that poll (up to a period). Only pauses of a slot or more (they end
        on the grid, as :func:`sleep`'s do)."""
        return self.rest_s is not None and getattr(snap, "resting", None) is True and delay >= SLOT_S

    def fire(self) -> None:
        """A tick woken at rest published its snapshot: end the wait now (thread-safe, never blocks)."""
        self.fires += 1
        waiter, loop = self._waiter, self._loop
        if waiter is None or loop is None:
            return
        try:
            loop.call_soon_threadsafe(_wake, waiter, True)
        except RuntimeError:            # the loop closed
            pass

    async def wait(self, delay: float) -> bool:
        """Pause ``delay`` s (a rest wait); True when a rouse ended it (poll now)."""
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        self._loop, self._waiter = loop, waiter
        if self.fires != self._noted:   # a rouse since the poll's read, before this waiter was there to end
            waiter.set_result(True)     # (the control thread's fire() found none): poll now
        if self._injected is not None:
            try:
                await self._injected(delay)     # type: ignore[operator]
            finally:
                self._waiter = None
            roused = waiter.done()
        else:
            handle = loop.call_at(nearest_slot(loop.time() + delay), _wake, waiter, False)
            try:
                roused = await waiter
            finally:
                handle.cancel()
                self._waiter = None
        self.roused += roused
        return roused
