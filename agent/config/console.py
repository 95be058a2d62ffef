"""``console`` section: the local operator console in the browser (agent.console).

See docs/console.md. Loopback addresses need no token; any other address needs
``token`` (the agent refuses to start the console there without one and says so).
"""

from __future__ import annotations

import ipaddress
import math
import re

from pydantic import Field, field_validator

from agent.config.base import Section


#: How to make a good ``console.token`` (43 characters, 256 random bits); said in every refusal.
GENERATE_TOKEN = 'python3 -c "import secrets; print(secrets.token_urlsafe(32))"'
#: Shortest token accepted, characters.
TOKEN_MIN_CHARS = 20
#: Fewest guesses (log2) a token must need by the zxcvbn estimate: ~ 20 random URL-safe characters.
TOKEN_MIN_BITS = 64.0
#: zxcvbn looks at this many leading characters (its own limit; longer tokens are judged by their start).
_ZXCVBN_CHARS = 72


def token_problem(token: str) -> str | None:
    """Why ``token`` is not a usable console token (charset, length, guessability), or None.

    Guessability is the zxcvbn estimate (Dropbox's password strength estimator, PyPI ``zxcvbn``):
    repeats, sequences, keyboard runs, dictionary words and dates cost an attacker little.
    """
    if not re.fullmatch(r"[A-Za-z0-9._~-]+", token):
        return "console.token may hold only A-Z a-z 0-9 . _ ~ - (it travels in a URL)"
    if len(token) < TOKEN_MIN_CHARS:
        return f"console.token is {len(token)} characters; at least {TOKEN_MIN_CHARS} are required"
    from zxcvbn import zxcvbn   # imported only when a token is set (its dictionaries load once, ~20 ms)

    bits = zxcvbn(token[:_ZXCVBN_CHARS])["guesses_log10"] * math.log2(10)
    if bits < TOKEN_MIN_BITS:
        return (f"console.token is too easy to guess (about 2^{bits:.0f} guesses by the zxcvbn estimate; "
                f"at least 2^{TOKEN_MIN_BITS:.0f} are required)")
    return None


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP literals (127.0.0.0/8, ::1); False for anything else."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class ConsoleConfig(Section):
    """Operator console (aiohttp web page + one WebSocket per open tab).

    Attributes:
        enabled: serve the console (default false; the shipped simulated tank turns it on).
        host: address to bind; loopback by default. Any other address requires ``token``.
        port: TCP port.
        token: shared secret for non-loopback addresses: open ``http://HOST:PORT/?token=TOKEN``
            once, the page then holds a session derived from it (never the token) in an HttpOnly
            cookie. When set it is required on loopback too. 20..256 of ``A-Za-z0-9._~-`` and
            hard to guess (zxcvbn estimate >= 2^64 guesses); :data:`GENERATE_TOKEN` makes one.
        camera: camera id shown; None = the first configured camera.
        jpeg_quality: JPEG quality of the live view, 1..100.
        width: live-view width, px (height keeps the aspect); None = the camera's.
        max_fps: most frames per second sent to one tab.
        state_hz: state messages (battery, speed, odometry...) per second to one tab.
        repeat_ms: the page repeats a held motion command this often, ms; below the watchdog.
        max_vx_mps, max_omega_radps: largest |vx| / |omega| accepted; None = the base's limits.
        max_message_bytes: longer messages from the page are rejected.
        max_sessions: most tabs connected at once; more are refused (HTTP 503).
    """

    enabled: bool = False
    host: str = Field("127.0.0.1", min_length=1, max_length=253)
    port: int = Field(8080, ge=1, le=65535)
    token: str | None = Field(None, max_length=256)
    camera: str | None = Field(None, min_length=1, max_length=64)
    jpeg_quality: int = Field(70, ge=1, le=100)
    width: int | None = Field(None, ge=16, le=1920)
    max_fps: float = Field(15.0, ge=1.0, le=60.0)
    state_hz: float = Field(10.0, ge=1.0, le=50.0)
    repeat_ms: int = Field(100, ge=20, le=400)
    max_vx_mps: float | None = Field(None, gt=0.0, le=20.0)
    max_omega_radps: float | None = Field(None, gt=0.0, le=100.0)
    max_message_bytes: int = Field(1024, ge=128, le=65536)
    max_sessions: int = Field(8, ge=1, le=64)

    @field_validator("token")
    @classmethod
    def _strong_token(cls, value: str | None) -> str | None:
        if value is None:
            return None
        problem = token_problem(value)
        if problem is not None:
            raise ValueError(f"{problem}; generate one with: {GENERATE_TOKEN}")
        return value

    @property
    def loopback(self) -> bool:
        """The configured ``host`` is a loopback address."""
        return is_loopback(self.host)
