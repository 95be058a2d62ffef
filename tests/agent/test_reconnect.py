"""agent/support/reconnect.py: the one reconnect loop, on a virtual clock (no wall-clock waits)."""

from __future__ import annotations

import asyncio
import logging
import random

import pytest

from agent.ports import LinkState, LinkStatus
from agent.support.reconnect import Reconnector, backoff_s
from agent.testing.clock import VirtualClock

LOGGER = "test.reconnect"


def link(clock: VirtualClock, **kw) -> Reconnector:
    return Reconnector("test: link to peer", logging.getLogger(LOGGER), first_s=0.5, max_s=4.0,
                       clock=clock.time, sleep=clock.sleep, rng=random.Random(7), **kw)


def script(r: Reconnector, outcomes: list) -> callable:
    """A session that plays ``outcomes`` in turn: an exception to raise, "up" (connect then drop)."""
    async def session() -> None:
        outcome = outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        r.up()
    return session


async def run_until_done(r: Reconnector, session, clock: VirtualClock, outcomes: list) -> None:
    """Run until ``outcomes`` is used up and the loop pauses once more, then cancel it."""
    clock.stop_when(lambda: not outcomes)
    with pytest.raises(asyncio.CancelledError):
        await r.run(session, errors=(OSError,))


async def test_failures_back_off_doubling_capped_and_are_logged_once_each_way(caplog):
    clock = VirtualClock()
    outcomes = [OSError("refused")] * 6 + ["up", OSError("down again")]
    r = link(clock)
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        await run_until_done(r, script(r, outcomes), clock, outcomes)
    ceilings = [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    for pause, ceiling in zip(clock.sleeps[:6], ceilings):
        assert 0.5 * ceiling <= pause <= ceiling
    assert 0.25 <= clock.sleeps[6] <= 0.5            # after a session that was up: from the start
    assert 0.25 <= clock.sleeps[7] <= 0.5            # first failure of the next streak
    records = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]
    warnings = [m for lvl, m in records if lvl == logging.WARNING]
    infos = [m for lvl, m in records if lvl == logging.INFO]
    assert len(warnings) == 2 and "test: link to peer failed: refused; retrying forever" in warnings[0]
    assert len(infos) == 1 and "up again after 6 failed attempt(s)" in infos[0]
    assert r.total_failures == 7 and r.failures == 1 and r.connects == 1
    assert r.last_error == "OSError: down again"


async def test_status_follows_the_link_on_the_injected_clock():
    clock = VirtualClock()
    r = link(clock)
    seen: list[LinkStatus] = []

    async def session() -> None:
        seen.append(r.status("peer", {"n": 1}, {"url": "x"}))
        if len(seen) < 3:
            raise OSError("no")
        r.up()
        seen.append(r.status("peer", {"n": 2}, {"url": "x"}))

    clock.stop_when(lambda: len(seen) >= 4)
    with pytest.raises(asyncio.CancelledError):
        await r.run(session)
    states = [(s.state, s.connected) for s in seen]
    assert states == [(LinkState.CONNECTING, False), (LinkState.DOWN, False), (LinkState.DOWN, False),
                      (LinkState.UP, True)]
    assert seen[1].since == 0.0 and seen[3].since == pytest.approx(sum(clock.sleeps[:2]))
    assert seen[3]["n"] == 2 and seen[3]["url"] == "x" and seen[3]["state"] == "up"


async def test_a_bug_is_logged_with_its_traceback_once_and_retried(caplog):
    clock = VirtualClock()
    outcomes = [RuntimeError("bug")] * 3 + ["up"]
    r = link(clock)
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        await run_until_done(r, script(r, outcomes), clock, outcomes)
    errors = [x for x in caplog.records if x.name == LOGGER and x.levelno == logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is not None and "failed unexpectedly" in errors[0].getMessage()
    assert r.connects == 1


async def test_a_bug_propagates_when_retry_bugs_is_off():
    clock = VirtualClock()
    r = link(clock, retry_bugs=False)
    outcomes = [OSError("net"), RuntimeError("bug")]
    with pytest.raises(RuntimeError, match="bug"):
        await r.run(script(r, outcomes), errors=(OSError,))
    assert len(clock.sleeps) == 1


async def test_a_refusal_waits_the_longer_period_and_says_so_once(caplog):
    clock = VirtualClock()
    outcomes = [PermissionError("kicked")] * 3 + [OSError("net")]
    r = link(clock, refused=lambda err: isinstance(err, PermissionError), refused_s=30.0)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        await run_until_done(r, script(r, outcomes), clock, outcomes)
    assert clock.sleeps[:3] == [30.0, 30.0, 30.0]
    assert clock.sleeps[3] <= 4.0
    messages = [x.getMessage() for x in caplog.records if x.name == LOGGER]
    assert sum("refused the robot: kicked; retrying every 30 s" in m for m in messages) == 1


async def test_cancellation_ends_the_loop_in_a_real_pause():
    r = Reconnector("test: link", logging.getLogger(LOGGER), first_s=60.0, max_s=60.0)

    async def session() -> None:
        raise OSError("down")

    task = asyncio.create_task(r.run(session))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 1.0)
    assert r.failures == 1


def test_backoff_is_importable_from_ratelimit_too():
    from agent.support.ratelimit import backoff_s as again
    assert again is backoff_s


async def test_a_cancellation_a_library_turned_into_a_link_error_still_ends_the_loop():
    """aiohttp's resolver can answer a cancel with a connection error: the loop must not retry."""
    entered = asyncio.Event()
    attempts = 0

    async def swallowing_session() -> None:
        nonlocal attempts
        attempts += 1
        if attempts > 1:                  # a retry after the cancel (the defect): end the test here
            raise asyncio.CancelledError
        entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise OSError("Cannot connect to host: resolver cancelled") from None

    link = Reconnector("test link", logging.getLogger("test"), first_s=0.01, max_s=0.02)
    task = asyncio.ensure_future(link.run(swallowing_session))
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 2.0)
    assert attempts == 1
