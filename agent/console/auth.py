"""Who may use the console: the token rule and the WebSocket origin check.

- A console on a loopback address with no ``console.token`` is open to local processes.
- With a token (required on any other address), a request must carry it: once as
  ``?token=TOKEN`` in the URL (answered with a redirect that sets an HttpOnly cookie and drops
  the token from the address bar), then as that cookie. Anything else gets 401 and does nothing.
- The WebSocket must come from the console's own page: a browser sends ``Origin``, and an
  origin whose host:port differs from the request's ``Host`` gets 403 (another web site open
  in the same browser cannot drive the robot through a loopback console).
- Without a token, the request's ``Host`` must name a loopback address (``localhost``,
  ``127.x.y.z``, ``[::1]``), else 421: a DNS-rebinding page (``evil.example`` resolving to
  127.0.0.1) sends its own name as both Host and Origin, which the origin check alone lets by.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from aiohttp import web

from agent.config.console import ConsoleConfig
from agent.ratelimit import RateLimitedLog, safe

log = logging.getLogger(__name__)

COOKIE = "robot_console"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def refusal(cfg: ConsoleConfig) -> str | None:
    """Why the console must not start with ``cfg`` (a non-loopback host without a token), or None."""
    if cfg.loopback or cfg.token:
        return None
    return (f"console NOT started: host {cfg.host} is not a loopback address and console.token is null; "
            f"set console.token (8+ of A-Z a-z 0-9 . _ ~ -) and open http://{cfg.host}:{cfg.port}/?token=<console.token> "
            f"once, or bind console.host to 127.0.0.1")


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


class TokenGate:
    """The token rule of the module docstring; ``middleware`` goes into the aiohttp app.

    Attributes:
        refused: requests answered 401 (bad or missing token) or 403 (foreign origin).
    """

    def __init__(self, token: str | None) -> None:
        self._token = token
        self.refused = 0
        self._warn = RateLimitedLog(log, 10.0)

    def _matches(self, value: str | None) -> bool:
        return value is not None and self._token is not None and \
            hmac.compare_digest(value.encode("utf-8", "replace"), self._token.encode())

    def _refuse(self, request: web.Request, status: int, why: str) -> web.Response:
        self.refused += 1
        self._warn.log(logging.WARNING, (status, request.remote), "console: %d for %s %s from %s: %s",
                       status, safe(request.method, 16), safe(request.path, 80), request.remote, why)
        return web.Response(status=status, text=f"{status}: {why}\n", content_type="text/plain")

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path == "/ws" and not same_origin(request):
            return self._refuse(request, 403, "WebSocket from a foreign origin")
        if self._token is None:
            if not loopback_host(request):
                return self._refuse(request, 421, "Host is not a loopback name (set console.token to "
                                                  "reach the console under another name)")
            return await handler(request)
        query = request.query.get("token")
        if query is not None:
            if not self._matches(query):
                return self._refuse(request, 401, "wrong token")
            target = request.rel_url.with_query([(k, v) for k, v in request.query.items() if k != "token"])
            response = web.Response(status=302, headers={"Location": str(target)})
            response.set_cookie(COOKIE, self._token, httponly=True, samesite="Strict", path="/")
            return response
        if not self._matches(request.cookies.get(COOKIE)):
            return self._refuse(request, 401, "open the console once as /?token=<console.token>")
        return await handler(request)
