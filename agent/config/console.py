"""``console`` section: the local operator console in the browser (agent.console).

See docs/console.md. Loopback addresses need no token; any other address needs
``token`` (the agent refuses to start the console there without one and says so).
"""

from __future__ import annotations

import ipaddress

from pydantic import Field

from agent.config.base import Section


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
            once, the page then holds it in an HttpOnly cookie. When set it is required on
            loopback too.
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
    token: str | None = Field(None, min_length=8, max_length=256, pattern=r"^[A-Za-z0-9._~-]+$")
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

    @property
    def loopback(self) -> bool:
        """The configured ``host`` is a loopback address."""
        return is_loopback(self.host)
