"""robot_msg's RobotState schedule: one timer callback per slot, no task step, no future.

The publisher sends a state on the slots ``k / state_hz`` of the event loop's clock (at 50 Hz the
boundaries of agent.support.beat's grid, where the other periodic senders wake too), the first at
once, and one more as soon as a ``ControllerCommand`` asks for it (``ctrl_update``). A late slot is
skipped, never sent twice. At most one asked-for state goes out per slot: a second ask within the
slot of the last one is merged into the next slot's state (counted by the caller), so a storm of
``ctrl_update`` costs at most twice ``state_hz`` states a second and no loop wake-up per ask.

A coroutine waiting on a timer costs the event loop a timer handle, a future and the task's wake-up
per state; :class:`SlotPublisher` sends from plain callbacks instead (the send is one non-blocking
ZeroMQ write), 50 times a second. The slot's state goes out two passes of the loop after its timer,
when the work the slot's other timers woke (the telemetry polls on the same grid) is done: the send
wakes ZeroMQ's I/O thread, which on a busy core preempts the thread that woke it, and a preempted
event loop is one more context switch (on the test machine ~47 against ~18 a second at 50 Hz with
0.2 ms of other work per slot). A send that raises ends :meth:`SlotPublisher.run` with that error,
as a failing publish loop did.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Callable

from agent.support.beat import slot_index

__all__ = ["SlotPublisher"]


class SlotPublisher:
    """Calls ``publish()`` on the slots ``k * period_s`` of the running loop's clock and on :meth:`now`.

    Args:
        period_s: the slot period, s (``1 / state_hz``).
        publish: sends one state (non-blocking; any exception ends :meth:`run`).

    :meth:`now` may be called from any thread; the rest runs on the event loop thread.
    """

    def __init__(self, period_s: float, publish: Callable[[], None]) -> None:
        self._period = period_s
        self._publish = publish
        self._loop: asyncio.AbstractEventLoop | None = None
        self._done: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._soon: asyncio.Handle | None = None
        self._next_t = 0.0
        self._lock = threading.Lock()
        self._asked_slot: int | None = None     # the slot (floor(t / period)) of the last ask served at once
        self._loop_thread = 0

    async def run(self) -> None:
        """Publish until cancelled (the first state at once); raises what a ``publish()`` raised."""
        loop = self._loop = asyncio.get_running_loop()
        self._done = loop.create_future()
        self._next_t = loop.time()
        self._loop_thread = threading.get_ident()
        with self._lock:
            self._asked_slot = None
        self._soon = loop.call_soon(self._fire, False)
        try:
            await self._done
        finally:
            self._cancel()
            self._done = self._loop = None

    def now(self) -> bool:
        """Ask for a state out of schedule (any thread): it goes out in the loop's next pass unless an
        ask was already served at once within this slot of ``period_s`` (then this one is merged into
        the next slot's state, which goes out anyway); the slots stay as they are.

        Returns:
            True when this ask's state goes out at once, False when it is merged (or no run is running).
        """
        loop = self._loop
        if loop is None:
            return False
        with self._lock:
            slot = math.floor(loop.time() / self._period)
            if slot == self._asked_slot:
                return False
            self._asked_slot = slot
        if threading.get_ident() == self._loop_thread:
            self._asked()
        else:
            try:
                loop.call_soon_threadsafe(self._asked)
            except RuntimeError:        # the loop closed meanwhile: no run to publish in
                return False
        return True

    def _asked(self) -> None:
        if self._loop is not None and self._soon is None:
            self._soon = self._loop.call_soon(self._fire, False)

    def _cancel(self) -> None:
        for handle in (self._timer, self._soon):
            if handle is not None:
                handle.cancel()
        self._timer = self._soon = None

    def _slot(self, done: asyncio.Future[None]) -> None:
        # the slot's timer: the state goes out two passes of the loop on, after the work the slot's other
        # timers woke, so ZeroMQ's I/O thread, woken by the send, does not preempt that work
        self._timer = None
        if self._loop is not None:
            self._loop.call_soon(self._loop.call_soon, self._fire, True, done)

    def _fire(self, slot: bool, done: asyncio.Future[None] | None = None) -> None:
        loop = self._loop
        if loop is None or self._done is None or self._done.done() or (slot and done is not self._done):
            return          # the run ended (a slot of an earlier run is never served)
        done = self._done
        if not slot:
            self._soon = None
        elif self._timer is not None:   # a ctrl_update's state went out since the slot's timer: the slot
            return                      # is served and the next one's timer set
        try:
            self._publish()
        except Exception as err:  # noqa: BLE001 - handed to run(), which raises it in its task
            self._cancel()
            done.set_exception(err)
            return
        now = loop.time()
        # this slot's state went out: the next slot (a late one skips, never bursts). A slot's own state
        # serves it even before its time: asyncio runs a timer up to its clock's resolution early
        if slot or now >= self._next_t:
            self._next_t = slot_index(max(now, self._next_t), self._period) * self._period
        timer = self._timer
        if timer is not None and timer.when() != self._next_t:
            timer.cancel()
            timer = None
        if timer is None:
            self._timer = loop.call_at(self._next_t, self._slot, done)
