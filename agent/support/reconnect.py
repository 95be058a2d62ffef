"""One reconnect loop for every link: jittered, capped backoff, forever, logged once each way.

Each adapter link (the ARTEX Socket.IO client, the Sim2Bot control and ``/video``
sockets, the robot_msg ZeroMQ sockets) runs its session under a
:class:`Reconnector`::

    link = Reconnector("sim2bot: bridge at ws://...", log, first_s=0.5, max_s=10.0)
    await link.run(session, errors=(OSError, WebSocketException, TimeoutError))

``session()`` connects, calls ``link.up()`` once the link is established and
serves until the link drops (returns or raises). Between attempts the loop
sleeps :func:`agent.support.ratelimit.backoff_s` (doubled per failed attempt, capped, jittered down to
50..100 % so a fleet does not retry in step); a session that got ``up()``
starts the count again. The first failure of a streak is logged at ``level``,
the rest at DEBUG, and the recovery once at INFO. An exception outside
``errors`` is a bug: logged with its traceback (at most every 10 s) and retried,
unless ``retry_bugs=False`` (then it propagates to the caller's supervisor).

An optional ``hint(err)`` adds advice to that one line (ARTEX: a hub name that does not
resolve, with what to set).

A peer that refuses the robot on purpose (auth rejected, kicked) is told apart
from a network fault by the optional ``refused(err)`` predicate: such a failure
waits ``refused_s`` instead and says so at WARNING once.

Cancellation (``task.cancel()``) ends :meth:`Reconnector.run` at once, in the
session or in the pause. Clock, sleep and random source are injectable (tests).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

from agent.ports import LinkState, LinkStatus
from agent.support.ratelimit import RateLimitedLog, backoff_s

__all__ = ["Reconnector", "backoff_s"]  # backoff_s: from agent.support.ratelimit

#: default pause after a deliberate refusal by the peer, s
REFUSED_S = 60.0
#: an unexpected exception (a bug) is logged with its traceback at most once per this many s
BUG_LOG_S = 10.0


class Reconnector:
    """Run a link's session forever; see the module docstring.

    Args:
        what: the link in log lines (``"ARTEX: hub at http://...:8765"``).
        logger: the adapter's logger.
        first_s, max_s: first and largest pause between attempts, s (see :func:`backoff_s`).
        level: log level of the first failure of a streak.
        retry_bugs: retry after an exception outside ``errors`` too (else it propagates).
        refused: predicate telling a deliberate refusal by the peer from a fault (None: never).
        refused_s: pause after a refusal, s.
        hint: ``err -> str`` advice appended to the first failure's line ("" for none).
        clock: monotonic clock, s. sleep: the pause coroutine. rng: jitter source.

    Attributes:
        failures: failed attempts since the link was last up (0 while it is up).
        total_failures: failed attempts since construction.
        connects: sessions that reached ``up()``.
        connected: a session is up now. since: monotonic time of the last change of :attr:`state`, s.
        last_error: ``"Type: message"`` of the newest failure, "" before any.
    """

    def __init__(self, what: str, logger: logging.Logger, *, first_s: float, max_s: float,
                 level: int = logging.WARNING, retry_bugs: bool = True,
                 refused: Callable[[BaseException], bool] | None = None, refused_s: float = REFUSED_S,
                 hint: Callable[[BaseException], str] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
                 rng: random.Random | None = None) -> None:
        self.what = what
        self._log = logger
        self._first_s, self._max_s = first_s, max_s
        self._level = level
        self._retry_bugs = retry_bugs
        self._refused = refused
        self._refused_s = refused_s
        self._hint = hint
        self._clock, self._sleep, self._rng = clock, sleep, rng
        self._bugs = RateLimitedLog(logger, BUG_LOG_S, clock=clock)
        self._was_up = False
        self._refusing = False
        self._down_since: float | None = None
        self.connected = False
        self.since = clock()
        self.failures = 0
        self.total_failures = 0
        self.connects = 0
        self.last_error = ""

    def up(self) -> None:
        """The session established the link: reset the backoff, log the recovery once."""
        self._was_up = self.connected = True
        self.since = self._clock()
        self.connects += 1
        if self.failures:
            down_s = self._clock() - self._down_since if self._down_since is not None else 0.0
            self._log.info("%s: up again after %d failed attempt(s) over %.1f s", self.what, self.failures, down_s)
        self.failures = 0
        self._down_since = None

    async def run(self, session: Callable[[], Awaitable[object]],
                  errors: tuple[type[BaseException], ...] = (OSError, TimeoutError)) -> NoReturn:
        """Call ``session()`` forever, pausing between calls. Ends only by cancellation (or a bug
        with ``retry_bugs=False``)."""
        while True:
            self._was_up = False
            try:
                await session()
            except errors as exc:
                pause = self._pause(exc)
            except Exception as exc:
                if not self._retry_bugs:
                    raise
                self._bugs.log(logging.ERROR, "bug", "%s failed unexpectedly; retrying", self.what, exc_info=True)
                pause = self._pause(exc, logged=True)
            else:
                pause = self._pause(None)
            await self._sleep(pause)

    @property
    def state(self) -> LinkState:
        """``up`` while a session is up, ``down`` while attempts fail, else ``connecting``."""
        return LinkState.UP if self.connected else LinkState.DOWN if self.failures else LinkState.CONNECTING

    def status(self, name: str, counters: dict[str, int], detail: dict[str, Any],
               connected: bool | None = None) -> LinkStatus:
        """This link's :class:`LinkStatus` with the adapter's ``counters`` and ``detail``
        (``connected`` overrides the session flag when the adapter knows better)."""
        up = self.connected if connected is None else connected
        state = LinkState.UP if up else self.state if self.state is not LinkState.UP else LinkState.CONNECTING
        return LinkStatus(name=name, state=state, connected=up, since=self.since, last_error=self.last_error,
                          counters=counters, detail=detail)

    def _pause(self, err: BaseException | None, logged: bool = False) -> float:
        """Count a failure (an error before ``up()``) and return the pause before the next attempt, s.

        Raises:
            CancelledError: the task was cancelled and a library answered with a link error
                (aiohttp's resolver can): the cancel stands; nothing is counted or logged.
        """
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise asyncio.CancelledError
        if self.connected:
            self.connected = False
            self.since = self._clock()
        if err is not None:
            self.last_error = f"{type(err).__name__}: {err}"
        if err is not None and self._refused is not None and self._refused(err):
            # a refusal (auth rejected, kicked) waits the longer period even right after an up session
            self._note_failure()
            if not self._refusing:
                self._log.warning("%s refused the robot: %s; retrying every %.0f s (not a network fault)",
                                  self.what, err, self._refused_s)
            self._refusing = True
            return self._refused_s
        self._refusing = False
        if err is None or self._was_up:
            return backoff_s(0, self._first_s, self._max_s, self._rng)
        first = self.failures == 0
        self._note_failure()
        if not logged:
            advice = self._hint(err) if self._hint is not None and first else ""
            self._log.log(self._level if first else logging.DEBUG, "%s failed: %s; retrying forever "
                          "(backoff %.1f..%.1f s)%s", self.what, err or type(err).__name__, self._first_s, self._max_s,
                          f"; {advice}" if advice else "")
        return backoff_s(self.failures - 1, self._first_s, self._max_s, self._rng)

    def _note_failure(self) -> None:
        if self.failures == 0:
            self._down_since = self.since = self._clock()
        self.failures += 1
        self.total_failures += 1
