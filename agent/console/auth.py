"""Who may use the console: the token rule, login throttling and the WebSocket origin check.

- A console on a loopback address with no ``console.token`` is open to local processes.
- With a token (required on any other address), a request must carry it: once as
  ``?token=TOKEN`` in the URL (answered with a redirect that sets a session cookie and drops
  the token from the address bar), then as that cookie. Anything else gets 401 and does nothing.
- The cookie never holds the token: its value is ``ISSUED.MAC``, MAC = HMAC-SHA256 keyed with
  the token over the console's port and the issue time (Unix s). It is valid for
  :data:`SESSION_S` on this console only (another port's console, or the same one after a
  token change, refuses it), HttpOnly, SameSite=Strict, and named for the port
  (``robot_console_8080``): browsers share cookies across the ports of a host, so a service on
  another port of the robot sees at most a session value for this console, never the token.
- ``/metrics`` (agent.recorder, for a Prometheus scraper, which keeps no cookie) also takes the
  token as ``Authorization: Bearer TOKEN`` (:data:`BEARER_PATHS`); a wrong one is throttled the same.
- Wrong tokens and wrong sessions back off (agent.console.throttle): a blocked client gets 429
  with ``Retry-After`` at once, without its token being looked at.
- The WebSocket must come from the console's own page: a browser sends ``Origin``, and an
  origin whose host:port differs from the request's ``Host`` gets 403 (another web site open
  in the same browser cannot drive the robot through a loopback console).
- Without a token, the request's ``Host`` must name a loopback address (``localhost``,
  ``127.x.y.z``, ``[::1]``), else 421: a DNS-rebinding page (``evil.example`` resolving to
  127.0.0.1) sends its own name as both Host and Origin, which the origin check alone lets by.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import math
import time
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from aiohttp import web

from agent.config.console import ConsoleConfig, GENERATE_TOKEN
from agent.console.throttle import Throttle
from agent.support.ratelimit import RateLimitedLog, safe

log = logging.getLogger(__name__)

#: How long a session cookie is valid after the token was given, s (7 days).
SESSION_S = 7 * 24 * 3600
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
#: paths that also take ``Authorization: Bearer <console.token>`` (a scraper keeps no cookie)
BEARER_PATHS = frozenset({"/metrics"})


def cookie_name(port: int) -> str:
    """The session cookie's name for the console on ``port``."""
    return f"robot_console_{port}"


def refusal(cfg: ConsoleConfig) -> str | None:
    """Why the console must not start with ``cfg`` (a non-loopback host without a token), or None."""
    if cfg.loopback or cfg.token:
        return None
    return (f"console NOT started: host {cfg.host} is not a loopback address and console.token is null; "
            f"set console.token (generate one: {GENERATE_TOKEN}) and open "
            f"http://{cfg.host}:{cfg.port}/?token=<console.token> once, or bind console.host to 127.0.0.1")


def same_origin(request: web.Request) -> bool:
    """True when the request has no ``Origin`` header or its host:port equals the ``Host`` header."""
    origin = request.headers.get("Origin")
    if origin is None:
        return True
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return False
    return parts.netloc.lower() == request.host.lower()


def loopback_host(request: web.Request) -> bool:
    """True when the ``Host`` header names a loopback address (any port)."""
    host = request.host.rsplit(":", 1)[0] if not request.host.endswith("]") else request.host
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Sessions:
    """Session values for the cookie (see the module docstring); ``clock`` gives Unix s."""

    def __init__(self, token: str, port: int, clock: Callable[[], float] = time.time) -> None:
        self._key = token.encode()
        self._port = port
        self._clock = clock

    def _mac(self, issued: int) -> str:
        return hmac.new(self._key, f"robot-console-session:{self._port}:{issued}".encode(), hashlib.sha256).hexdigest()

    def issue(self) -> str:
        """A new session value ``ISSUED.MAC``."""
        issued = int(self._clock())
        return f"{issued}.{self._mac(issued)}"

    def valid(self, value: str) -> bool:
        """``value`` was issued by this console with this token within :data:`SESSION_S` (and not in the future)."""
        issued_text, _, mac = value.partition(".")
        if not issued_text.isdigit() or len(issued_text) > 12 or len(mac) != 64:
            return False
        issued = int(issued_text)
        if not -60 <= self._clock() - issued <= SESSION_S:
            return False
        return hmac.compare_digest(mac.encode("ascii", "replace"), self._mac(issued).encode())


class TokenGate:
    """The rules of the module docstring; ``middleware`` goes into the aiohttp app.

    Args:
        token: ``console.token`` (None: loopback without a token).
        port: the console's configured port (cookie name and session MAC).
        throttle: the login backoff (a default one when None).

    Attributes:
        refused: requests answered 401 (bad or missing token), 403 (foreign origin) or 421.
        throttle: the :class:`~agent.console.throttle.Throttle`; ``throttle.throttled`` counts 429s.
    """

    def __init__(self, token: str | None, port: int, throttle: Throttle | None = None) -> None:
        self._token = token
        self.cookie = cookie_name(port)
        self.sessions = Sessions(token, port) if token else None
        self.throttle = throttle or Throttle()
        self.refused = 0
        self._warn = RateLimitedLog(log, 10.0)

    def _matches(self, value: str) -> bool:
        return self._token is not None and hmac.compare_digest(value.encode("utf-8", "replace"), self._token.encode())

    def _refuse(self, request: web.Request, status: int, why: str) -> web.Response:
        self.refused += 1
        self._warn.log(logging.WARNING, (status, request.remote), "console: %d for %s %s from %s: %s",
                       status, safe(request.method, 16), safe(request.path, 80), request.remote, why)
        return web.Response(status=status, text=f"{status}: {why}\n", content_type="text/plain")

    def _throttled(self, request: web.Request, wait_s: float) -> web.Response:
        self.throttle.refuse()
        retry = max(1, math.ceil(wait_s))
        self._warn.log(logging.WARNING, (429, request.remote), "console: 429 for %s from %s: too many wrong "
                       "tokens, blocked for %d s more", safe(request.path, 80), request.remote, retry)
        return web.Response(status=429, headers={"Retry-After": str(retry)}, content_type="text/plain",
                            text=f"429: too many wrong tokens from this address; retry in {retry} s\n")

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path == "/ws" and not same_origin(request):
            return self._refuse(request, 403, "WebSocket from a foreign origin")
        if self.sessions is None:
            if not loopback_host(request):
                return self._refuse(request, 421, "Host is not a loopback name (set console.token to "
                                                  "reach the console under another name)")
            return await handler(request)
        bearer = request.headers.get("Authorization") if request.path in BEARER_PATHS else None
        query = request.query.get("token")
        cookie = request.cookies.get(self.cookie)
        if bearer is not None:                        # a scraper (Prometheus) holds no cookie
            wait = self.throttle.retry_after_s(request.remote)
            if wait > 0.0:
                return self._throttled(request, wait)
            scheme, _, value = bearer.partition(" ")
            if scheme.lower() != "bearer" or not self._matches(value.strip()):
                self.throttle.failed(request.remote)
                return self._refuse(request, 401, "wrong bearer token")
            self.throttle.succeeded(request.remote)
            return await handler(request)
        if query is None and cookie is None:          # no credential: nothing guessed, nothing throttled
            return self._refuse(request, 401, "open the console once as /?token=<console.token>")
        wait = self.throttle.retry_after_s(request.remote)
        if wait > 0.0:
            return self._throttled(request, wait)
        if query is not None:
            if not self._matches(query):
                self.throttle.failed(request.remote)
                return self._refuse(request, 401, "wrong token")
            self.throttle.succeeded(request.remote)
            target = request.rel_url.with_query([(k, v) for k, v in request.query.items() if k != "token"])
            response = web.Response(status=302, headers={"Location": str(target), "Cache-Control": "no-store"})
            response.set_cookie(self.cookie, self.sessions.issue(), httponly=True, samesite="Strict", path="/",
                                max_age=SESSION_S)
            return response
        if cookie is None or not self.sessions.valid(cookie):
            self.throttle.failed(request.remote)
            return self._refuse(request, 401, "session expired or not from this console: open the console "
                                              "once as /?token=<console.token>")
        self.throttle.succeeded(request.remote)
        return await handler(request)
