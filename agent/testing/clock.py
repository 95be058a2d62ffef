"""A virtual monotonic clock and sleep for loops that take ``clock`` and ``sleep`` arguments.

``await clock.sleep(dt)`` advances :meth:`VirtualClock.time` by ``dt`` at once (after
yielding to the event loop once, so other tasks run), records ``dt`` in
:attr:`VirtualClock.sleeps`, and raises ``asyncio.CancelledError`` once the
``stop_when`` predicate holds, which ends the loop under test as a cancellation would.
Periodic loops (reconnect pauses, telemetry, video pacing) then run in no wall time
and give the same answer on a loaded machine.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["VirtualClock"]


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
