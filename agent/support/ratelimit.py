"""Pacing of repeated events: rate-limited log lines and reconnect backoff.

Every part that meets untrusted input or a failing peer repeats itself: the same
rejected message a hundred times a second, the same unreachable server every
few seconds. :class:`RateLimitedLog` logs the first of a kind and then at most
one per interval, saying how many it held back; :func:`backoff_s` spaces
retries (doubled per failure, capped, jittered so a fleet does not retry in step), for the
one reconnect loop (:mod:`agent.support.reconnect`) and device and camera supervision.

Untrusted text (keys, message types, field names, authors) goes through :func:`safe`
before it reaches a log line, so a newline or an escape sequence sent by a peer cannot
forge log lines; rejections are rate-limited by ``(source, reason)``
(:meth:`RateLimitedLog.rejected`), not by their full text, so junk that varies in every
message still costs one line per reason per interval.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable

__all__ = ["MAX_DETAILS", "RateLimitedLog", "backoff_s", "safe"]

#: distinct details of held-back lines a summary names, at most (each clipped to :data:`DETAIL_CHARS`)
MAX_DETAILS = 8
DETAIL_CHARS = 60


class _Held:
    """One key's last report time, the lines held back since, and their distinct details (bounded)."""

    __slots__ = ("t", "n", "details", "unnamed")

    def __init__(self, t: float) -> None:
        self.t = t
        self.n = 0
        self.details: list[str] = []
        self.unnamed = False           # a held line's detail did not fit in MAX_DETAILS

    def hold(self, detail: str) -> None:
        self.n += 1
        if not detail or self.unnamed:     # (full and past it: nothing more to name)
            return
        detail = safe(detail, DETAIL_CHARS)
        if detail in self.details:
            return
        if len(self.details) < MAX_DETAILS:
            self.details.append(detail)
        else:
            self.unnamed = True

    def summary(self) -> str:
        """``3 more like it since the last report`` (``: key 'a', key 'b', ...`` with details)."""
        text = f"{self.n} more like it since the last report"
        if self.details:
            text += ": " + ", ".join(self.details) + (", ..." if self.unnamed else "")
        return text


class RateLimitedLog:
    """Log a message at most once per ``interval_s`` per key; the next one counts what was held back
    and names their distinct ``detail`` (what varies among the lines of one key: the repeated JSON key,
    the message size), at most :data:`MAX_DETAILS` of them, escaped with :func:`safe`.

    Thread-safe. Bounded: at most ``max_keys`` keys are remembered, the least recently
    logged forgotten first.

    Args:
        logger: where the lines go.
        interval_s: shortest time between two lines of one key, s.
        max_keys: keys remembered.
        clock: monotonic clock, s (injected in tests).
    """

    def __init__(self, logger: logging.Logger, interval_s: float = 10.0, *, max_keys: int = 256,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._log = logger
        self._interval = interval_s
        self._max_keys = max_keys
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: OrderedDict[Hashable, _Held] = OrderedDict()

    def log(self, level: int, key: Hashable, msg: str, *args: object, exc_info: bool = False,
            detail: str = "") -> bool:
        """Log ``msg % args`` at ``level`` unless ``key`` was logged within ``interval_s``.

        ``exc_info=True`` adds the traceback of the exception being handled, as ``logging`` does.
        ``detail``: a short label of this line among its key's (``key 'vx'``, ``70000 bytes``; untrusted
        text is escaped here); the next line logged for the key names those of the lines held back.

        Returns:
            True when the line was logged, False when it was held back (and counted).
        """
        now = self._clock()
        with self._lock:
            last = self._seen.get(key)
            if last is not None and now - last.t < self._interval:
                last.hold(detail)
                return False
            self._seen[key] = _Held(now)
            self._seen.move_to_end(key)
            while len(self._seen) > self._max_keys:
                self._seen.popitem(last=False)
        if last is not None and last.n:
            self._log.log(level, msg + " (%s)", *args, last.summary(), exc_info=exc_info)
        else:
            self._log.log(level, msg, *args, exc_info=exc_info)
        return True

    def rejected(self, level: int, err: BaseException, msg: str, *args: object) -> bool:
        """Log a rejection keyed by ``(err.source, err.reason)`` (a CommandError's; other errors by type),
        its ``detail`` (a CommandError's) named in a later summary."""
        key = (getattr(err, "source", ""), getattr(err, "reason", type(err).__name__))
        return self.log(level, key, msg, *args, detail=getattr(err, "detail", ""))

    def __call__(self, level: int, text: str) -> bool:
        """Log the finished ``text``, keyed by itself (identical texts are rate-limited)."""
        return self.log(level, text, "%s", text)


def backoff_s(attempt: int, first_s: float, max_s: float, rng: random.Random | None = None) -> float:
    """Delay before retry number ``attempt`` (0-based), s: ``first_s`` doubled per attempt,
    capped at ``max_s``, jittered down to 50..100 % of that."""
    ceiling = min(max_s, first_s * (2.0 ** min(max(attempt, 0), 30)))
    return (rng or random).uniform(0.5 * ceiling, ceiling)


def safe(text: object, limit: int = 120) -> str:
    """``text`` made fit for one log line: control characters, newlines and non-printable
    characters escaped as ``repr`` does (quotes not added), clipped to ``limit`` characters
    with ``...`` and the full length. Non-strings are shown by their ``repr``."""
    whole = text if isinstance(text, str) else repr(text)
    raw = whole[: 4 * limit]
    out = "".join(c if c.isprintable() and c != "\\" else repr(c)[1:-1] for c in raw)
    if len(out) <= limit and len(whole) == len(raw):
        return out
    return f"{out[:limit]}... ({len(whole)} chars)"
