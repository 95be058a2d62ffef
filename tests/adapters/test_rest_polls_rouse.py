"""A rouse that comes after a poller decided to skip its polls at rest but before its wait began
(agent.support.beat.RestPolls: ``skip_to`` then ``wait``) must end that wait at once: the control thread
calls ``fire`` whenever its woken tick is done, whatever the event loop is doing then. Lost, the moving
tank's telemetry waits for the next rest tick's slot (up to a rest period and a slot, ~0.17 s)."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Callable

from agent.support import beat
from tests.adapters.test_sim2bot_telemetry import snap

REST_S = 0.15


class Tank:
    """The robot port's rest hooks: the rest period and the rouse listener (the control loop's ``on_rouse``)."""

    rest_period_s = REST_S

    def __init__(self) -> None:
        self.listeners: list[Callable[[], None]] = []

    def on_rouse(self, listener: Callable[[], None]) -> None:
        self.listeners.append(listener)

    def rouse_from_another_thread(self) -> None:
        """What the control thread does after a tick woken at rest published its snapshot."""
        caller = threading.Thread(target=lambda: [listener() for listener in self.listeners])
        caller.start()
        caller.join()


async def test_a_rouse_after_the_skip_was_decided_and_before_the_wait_ends_the_wait_at_once():
    loop = asyncio.get_running_loop()
    tank = Tank()
    rest = beat.RestPolls(tank)
    now = loop.time()
    resting = dataclasses.replace(snap(1, now), resting=True)
    rest.note()                                     # the poll reads the resting snapshot
    period = 0.1
    at, skipped = rest.skip_to(now + period, period, resting)
    assert skipped >= 1 and at > now + REST_S       # the loop rests: the next poll after the next rest tick
    tank.rouse_from_another_thread()                # a command woke a tick: it moves now
    started = loop.time()
    roused = await rest.wait(at - loop.time())
    waited = loop.time() - started
    assert roused, f"the rouse was lost: the poll came at the rest tick's slot, {waited * 1000:.0f} ms later"
    assert rest.roused == 1
