"""Slowing down token guessing: failed console logins back off per client and for everyone.

A wrong token (in ``?token=`` or a wrong session cookie) is a *failure*. Each client (an IPv4
address, or an IPv6 /64: one host usually holds a whole /64) gets ``free`` failures, then
every further failure blocks it for twice as long as the one before (``base_s``, doubled,
capped at ``max_s``). All clients together get ``global_free`` failures before the same
backoff holds for every client that has not logged in recently, so many addresses guessing
at once are slowed as much as one. While a client is blocked its requests are answered at
once with 429 and a ``Retry-After``, without looking at the token (a guess in a blocked
window tells nothing), so the answer is instant and guessing costs time, not CPU. A client
that logged in (a right token or a valid session) keeps its way in during a global block and
its own failure count is cleared: the right token is never slowed by someone else's guessing.
A count is forgotten ``forget_s`` after its last failure.

Pure bookkeeping on an injected monotonic clock; the aiohttp middleware is agent.console.auth.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

#: Per client: failures before the backoff starts; the first block, s; the longest, s.
FREE, BASE_S, MAX_S = 5, 1.0, 300.0
#: All clients together: failures (within ``FORGET_S`` of each other) before everyone backs off.
GLOBAL_FREE, GLOBAL_MAX_S = 50, 60.0
#: A count (and a login) is remembered this long after its last event, s.
FORGET_S = 900.0
#: Clients remembered at most (the least recently seen are forgotten first).
MAX_CLIENTS = 4096


def client_key(remote: str | None) -> str:
    """The throttled unit for a peer address: the IPv4 address, or the IPv6 /64 ("" if unknown)."""
    if not remote:
        return ""
    try:
        ip = ipaddress.ip_address(remote.split("%", 1)[0])
    except ValueError:
        return remote[:64]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


@dataclass(slots=True)
class Backoff:
    """One counter: ``failures`` since it was last cleared, blocked until ``until`` (monotonic s)."""

    failures: int = 0
    until: float = 0.0
    last: float = -math.inf

    def fail(self, now: float, free: int, base_s: float, max_s: float, forget_s: float) -> None:
        if now - self.last > forget_s:
            self.failures = 0
        self.failures += 1
        self.last = now
        over = self.failures - free
        if over > 0:
            self.until = now + min(max_s, base_s * 2.0 ** min(over - 1, 32))

    def wait_s(self, now: float) -> float:
        return max(0.0, self.until - now)


class Throttle:
    """The backoff of the module docstring.

    Args:
        free, base_s, max_s: per client (see the module constants).
        global_free, global_max_s: for all clients together.
        forget_s: a count is forgotten this long after its last failure, s.
        clock: monotonic clock, s.

    Attributes:
        throttled: requests answered 429 so far.
    """

    def __init__(self, *, free: int = FREE, base_s: float = BASE_S, max_s: float = MAX_S,
                 global_free: int = GLOBAL_FREE, global_max_s: float = GLOBAL_MAX_S,
                 forget_s: float = FORGET_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._per = (free, base_s, max_s, forget_s)
        self._all = (global_free, base_s, global_max_s, forget_s)
        self._clock = clock
        self._clients: OrderedDict[str, Backoff] = OrderedDict()
        self._logins: OrderedDict[str, float] = OrderedDict()
        self._global = Backoff()
        self.throttled = 0

    def retry_after_s(self, remote: str | None) -> float:
        """How long the client at ``remote`` must wait before its token is looked at, s (0: go on)."""
        now, key = self._clock(), client_key(remote)
        own = self._clients.get(key)
        wait = own.wait_s(now) if own is not None else 0.0
        login = self._logins.get(key)
        if login is None or now - login > self._per[3]:
            wait = max(wait, self._global.wait_s(now))
        return wait

    def refuse(self) -> int:
        """Count one 429 answer; the whole seconds for ``Retry-After`` are the caller's."""
        self.throttled += 1
        return self.throttled

    def failed(self, remote: str | None) -> None:
        """A wrong token or session from ``remote``."""
        now, key = self._clock(), client_key(remote)
        own = self._clients.pop(key, None) or Backoff()
        own.fail(now, *self._per)
        self._clients[key] = own
        while len(self._clients) > MAX_CLIENTS:
            self._clients.popitem(last=False)
        self._global.fail(now, *self._all)

    def succeeded(self, remote: str | None) -> None:
        """A right token or a valid session from ``remote``: its count is cleared, global blocks pass it."""
        key = client_key(remote)
        self._clients.pop(key, None)
        self._logins.pop(key, None)
        self._logins[key] = self._clock()
        while len(self._logins) > MAX_CLIENTS:
            self._logins.popitem(last=False)
