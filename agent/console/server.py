"""The console web server: one aiohttp app, run as the agent's ``console`` adapter.

``GET /`` is the page, ``/static/*`` its script and style (shipped in agent/console/static,
no build step, no CDN), ``GET /ws`` the WebSocket of one tab (agent.console.session). The
token rule and the origin check are in agent.console.auth. Closing the tab that drove the
tank releases the ``console`` source: the tank stops at once (ControlLoop.release).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from aiohttp import web

from agent.config import AgentConfig
from agent.console.auth import TokenGate, refusal
from agent.console.messages import SOURCE, Limits
from agent.console.session import Session
from agent.ports import LinkStatus
from agent.ratelimit import RateLimitedLog
from agent.reconnect import Reconnector
from agent.video import FrameFormat

log = logging.getLogger(__name__)

STATIC = Path(__file__).resolve().parent / "static"
#: Largest WebSocket message aiohttp reads at all; ``console.max_message_bytes`` is checked after.
WS_MAX_MSG = 64 * 1024
#: Ping period of the tab's WebSocket, s: a silent dead peer is closed (and released) after ~2 of these.
WS_HEARTBEAT_S = 2.0
#: How long shutdown (and one close handshake) waits for open tabs to close, s.
SHUTDOWN_S = 2.0


class Console:
    """The operator console (see the module docstring and docs/console.md).

    Args:
        cfg: the agent configuration (``console``, ``base``, ``watchdog``).
        control: the control loop (``submit``, ``release``, ``snapshot``, ``description``).
        video: the VideoHub, or None when no camera is configured.

    Attributes:
        counters: ``received``, ``executed``, ``rejected`` (bad messages), ``refused`` (valid
            commands the control loop refused), ``frames_sent``, ``sessions`` (tabs opened).
        driver: the tab that sent the last motion command, or None.
        port: the bound TCP port once running (useful with ``console.port`` taken by the OS).
    """

    def __init__(self, cfg: AgentConfig, control: Any, video: Any) -> None:
        self.settings = cfg.console
        self.control = control
        self.video = video
        self.watchdog_s = cfg.source_timeout_s(SOURCE)
        self.limits = Limits(self.settings.max_vx_mps or cfg.base.max_speed_mps,
                             self.settings.max_omega_radps or control.description.max_omega_radps)
        self.camera = self._pick_camera(video)
        self.frame_format = FrameFormat("jpeg", width=self.settings.width, quality=self.settings.jpeg_quality)
        self.gate = TokenGate(self.settings.token)
        self.counters = {"received": 0, "executed": 0, "rejected": 0, "refused": 0, "frames_sent": 0, "sessions": 0}
        self.warn = RateLimitedLog(log, 10.0)
        self.driver: Session | None = None
        self.sessions: set[Session] = set()
        self.port: int | None = None
        self.ready = asyncio.Event()
        self.link = Reconnector(f"console: listener on {self.settings.host}:{self.settings.port}", log,
                                first_s=1.0, max_s=30.0)

    def _pick_camera(self, video: Any) -> str | None:
        ids = tuple(video.camera_ids) if video is not None else ()
        wanted = self.settings.camera
        if wanted is None:
            return ids[0] if ids else None
        if wanted not in ids:
            log.warning("console.camera %r is not a configured camera (have: %s); the page shows no video",
                      wanted, ", ".join(ids) or "none")
            return None
        return wanted

    def hello(self) -> dict[str, Any]:
        """The first message to a tab: robot name, camera, limits, repeat period, watchdog."""
        return {"type": "hello", "name": self.control.description.name, "source": SOURCE,
                "camera": self.camera, "limits": {"vx_mps": self.limits.vx_mps, "omega_radps": self.limits.omega_radps},
                "repeat_ms": self.settings.repeat_ms, "watchdog_s": self.watchdog_s}

    def status(self) -> LinkStatus:
        """The console's :class:`~agent.ports.LinkStatus`: ``connected`` while listening (a console
        that cannot bind is a link down), the counters, ``open`` (tabs connected now) and
        ``auth_refused`` (401/403 answers)."""
        return self.link.status(SOURCE, {**self.counters, "open": len(self.sessions),
                                         "auth_refused": self.gate.refused},
                                {"url": self.url()}, connected=self.ready.is_set())

    def url(self) -> str:
        """The address to open (with a ``?token=`` placeholder when a token is required)."""
        host = self.settings.host
        shown = f"[{host}]" if ":" in host else host
        base = f"http://{shown}:{self.port or self.settings.port}/"
        return base + ("?token=<console.token>" if self.settings.token else "")

    def app(self) -> web.Application:
        """The aiohttp application (routes and the token gate)."""
        app = web.Application(middlewares=[self.gate.middleware])
        app.router.add_get("/", self._index)
        app.router.add_get("/ws", self._socket)
        app.router.add_static("/static", STATIC)
        return app

    async def _index(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        if len(self.sessions) >= self.settings.max_sessions:
            return web.Response(status=503, text=f"503: {len(self.sessions)} console tabs open already\n")
        # no permessage-deflate: frames are JPEG (incompressible), state messages are small
        ws = web.WebSocketResponse(heartbeat=WS_HEARTBEAT_S, max_msg_size=WS_MAX_MSG, timeout=SHUTDOWN_S,
                                   compress=False)
        await ws.prepare(request)
        session = Session(self, ws, str(request.remote))
        self.sessions.add(session)
        self.counters["sessions"] += 1
        log.info("console: tab opened from %s (%d open)", session.peer, len(self.sessions))
        try:
            await session.run()
        finally:
            self.sessions.discard(session)
            self._closed(session)
            await ws.close()
        return ws

    def _closed(self, session: Session) -> None:
        if self.driver is session:
            self.driver = None
            self.control.release(SOURCE, f"console tab from {session.peer} closed")
        log.info("console: tab from %s closed (%d open)", session.peer, len(self.sessions))

    async def run(self) -> None:
        """Serve until cancelled, retrying the listener (port busy, address gone) forever with the
        links' backoff; on cancellation close every tab (releasing the source) and the listener."""
        await self.link.run(self._serve, errors=(OSError,))

    async def _serve(self) -> None:
        runner = web.AppRunner(self.app(), handle_signals=False, access_log=None, shutdown_timeout=SHUTDOWN_S)
        await runner.setup()
        try:
            await web.TCPSite(runner, self.settings.host, self.settings.port).start()
            self.port = runner.addresses[0][1] if runner.addresses else self.settings.port
            self.link.up()
            self._announce()
            self.ready.set()
            await asyncio.Event().wait()
        finally:
            self.ready.clear()
            await asyncio.gather(*(s.ws.close() for s in list(self.sessions)), return_exceptions=True)
            await runner.cleanup()

    def _announce(self) -> None:
        if self.settings.loopback:
            log.info("console: open %s in a browser on this machine (source %r, priority above the protocols)",
                     self.url(), SOURCE)
        else:
            log.warning("console on non-loopback address %s: open http://<this-machine>:%d/?token=<console.token> "
                        "once; requests without the token get 401", self.settings.host, self.port)


def build_console(cfg: AgentConfig, control: Any, video: Any) -> Console | None:
    """The console for ``cfg``, or None (logged WARNING) when its address needs a token it lacks."""
    why = refusal(cfg.console)
    if why is not None:
        log.warning("%s", why)
        return None
    return Console(cfg, control, video)
