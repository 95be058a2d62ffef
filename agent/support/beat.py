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

The grid is on the running loop's clock (``loop.time()``, ``time.monotonic``). Components whose
clock and sleep are injected (tests on :class:`agent.testing.clock.VirtualClock`) are not aligned.
"""

from __future__ import annotations

import asyncio
import math
from typing import TypeVar

__all__ = ["SLOT_S", "nearest_slot", "sleep", "slot_index"]

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
