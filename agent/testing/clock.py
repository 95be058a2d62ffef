"""A virtual monotonic clock and sleep for loops that take ``clock`` and ``sleep`` arguments.

``await clock.sleep(dt)`` advances :meth:`VirtualClock.time` by ``dt`` at once (after
yielding to the event loop once, so other tasks run), records ``dt`` in
:attr:`VirtualClock.sleeps`, and raises ``asyncio.CancelledError`` once the
``stop_when`` predicate holds, which ends the loop under test as a cancellation would.
Periodic loops (reconnect pauses, telemetry, video pacing) then run in no wall time
and give the same answer on a loaded machine.

:class:`VirtualTimeLoop` is a whole asyncio event loop on virtual time, for code that pauses on the
running loop's own clock (agent.support.beat): each time the loop would block until its next timer,
time jumps there at once and the wait is counted in :attr:`VirtualTimeLoop.wakeups` (each one a
wake-up of a real loop's thread).
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["VirtualClock", "VirtualTimeLoop"]


class VirtualClock:
    """Virtual time, s, starting at ``start``.

    Attributes:
        sleeps: every pause asked for, s, in order.
    """

    def __init__(self, start: float = 0.0) -> None:
        self.now = start
        self.sleeps: list[float] = []
        self._stop: Callable[[], bool] = lambda: False

    def time(self) -> float:
        """The virtual monotonic time, s."""
        return self.now

    def stop_when(self, predicate: Callable[[], bool]) -> None:
        """Raise CancelledError from the next :meth:`sleep` at which ``predicate()`` is true."""
        self._stop = predicate

    def advance(self, dt: float) -> None:
        """Move time forward by ``dt`` s without a sleep."""
        self.now += max(0.0, dt)

    async def sleep(self, dt: float) -> None:
        """Record ``dt``, yield once to the event loop, advance time; cancel when told to stop."""
        self.sleeps.append(dt)
        await asyncio.sleep(0)
        self.now += max(0.0, dt)
        if self._stop():
            raise asyncio.CancelledError


class _JumpingSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    """The loop's selector: ready I/O at once; a wait for a timer jumps the loop's time instead."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        super().__init__()
        self._virtual = loop

    def select(self, timeout: float | None = None) -> list:
        ready = super().select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:             # no timer: only I/O (or another thread) can wake the loop
            return super().select(None)
        self._virtual.now += timeout
        self._virtual.wakeups += 1
        return ready


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An asyncio event loop whose ``time()`` is virtual, starting at ``start`` s: a wait for the
    next timer takes no wall time (ready I/O is still served at once).

    Attributes:
        now: the loop's time, s.
        wakeups: how many times the loop waited for a timer (a real loop's thread would have slept
            and woken up each time).
    """

    def __init__(self, start: float = 0.0) -> None:
        self.now = start
        self.wakeups = 0
        super().__init__(_JumpingSelector(self))

    def time(self) -> float:
        """The virtual time, s."""
        return self.now

    def run_for(self, seconds: float, *coros: Coroutine[Any, Any, Any]) -> None:
        """Run ``coros`` as tasks for ``seconds`` of the loop's time, then cancel them and wait for
        their ends (their errors, cancellation included, are swallowed). The loop stays open."""
        async def main() -> None:
            tasks = [asyncio.ensure_future(c) for c in coros]
            await asyncio.sleep(seconds)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        self.run_until_complete(main())
