"""The console web server: one aiohttp app, run as the agent's ``console`` adapter.

``GET /`` is the page, ``/static/*`` its script and style (shipped in agent/console/static,
no build step, no CDN), ``GET /ws`` the WebSocket of one tab (agent.console.session). The
token rule, login throttling and the origin check are in agent.console.auth.

One tab drives at a time (:class:`Control`): the first tab opened while no tab holds control
gets it; any other tab watches (it may stop, and e-stop) until it takes control explicitly,
which releases the ``console`` source (the tank stops at once) and tells the previous holder.
Closing the tab in control releases the source too; closing a watching tab changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from agent.config import AgentConfig
from agent.console.auth import TokenGate, refusal
from agent.console.messages import SOURCE, Limits
from agent.console.session import WS_MAX_BYTES, Session
from agent.control.safety import describe_halt
from agent.errors import CommandDeclined
from agent.ports import LinkStatus
from agent.support.ratelimit import RateLimitedLog
from agent.support.reconnect import Reconnector
from agent.video import FrameFormat

log = logging.getLogger(__name__)

STATIC = Path(__file__).resolve().parent / "static"
#: aiohttp's ``max_msg_size`` for the tab's WebSocket: one more than the largest message it reads
#: (agent.console.session.WS_MAX_BYTES), as aiohttp refuses a message of exactly ``max_msg_size`` bytes
#: (its check is ``>=``; its close text then read "Message size 65536 exceeds limit 65536")
WS_MAX_MSG = WS_MAX_BYTES + 1
#: Ping period of the tab's WebSocket, s: a silent dead peer is closed (and released) after ~2 of these.
WS_HEARTBEAT_S = 2.0
#: How long shutdown (and one close handshake) waits for open tabs to close, s.
SHUTDOWN_S = 2.0


def clock_text(unix_s: float) -> str:
    """``HH:MM:SS`` local time of ``unix_s``."""
    return time.strftime("%H:%M:%S", time.localtime(unix_s))


class Control:
    """Which tab drives, since when, and whether it must press again before it drives.

    Attributes:
        holder: the tab in control, or None.
        since_unix_s: when ``holder`` got control, Unix s.
        press_needed: the holder must let go (a zero drive) or press anew before it drives again
            (after it took control, or after a stop from any tab): a held key does not drive on.
        stopped_by: who caused ``press_needed`` ("" before any stop), for the refusal.
    """

    def __init__(self) -> None:
        self.holder: Session | None = None
        self.since_unix_s = 0.0
        self.press_needed = True
        self.stopped_by = ""

    def info(self, tab: Session) -> dict[str, Any]:
        """What ``tab``'s page shows: ``tab`` (its id), ``holder`` (id or None), ``you`` (bool),
        ``since_unix_s``, ``since`` (HH:MM:SS) and ``holder_peer`` (address of the holder)."""
        holder = self.holder
        return {"tab": tab.id, "holder": None if holder is None else holder.id, "you": holder is tab,
                "since_unix_s": round(self.since_unix_s, 3) if holder else None,
                "since": clock_text(self.since_unix_s) if holder else None,
                "holder_peer": holder.peer if holder else None}

    def refusal(self, tab: Session, press: bool) -> str | None:
        """Why ``tab`` may not drive now, or None (``press``: this drive is a new press)."""
        if self.holder is None:
            return "no tab holds control: take control to drive"
        if self.holder is not tab:
            return (f"this tab watches; tab {self.holder.id} ({self.holder.peer}) drives since "
                    f"{clock_text(self.since_unix_s)}: take control to drive")
        if self.press_needed:
            if not press:
                return f"{self.stopped_by or 'stopped'}: let go and press again to drive"
        return None

    def pressed(self, tab: Session) -> None:
        """The control loop accepted a press or a let-go (zero) from ``tab``: its next drive goes on."""
        if self.holder is tab:
            self.press_needed, self.stopped_by = False, ""


class Console:
    """The operator console (see the module docstring and docs/console.md).

    Args:
        cfg: the agent configuration (``console``, ``base``, ``watchdog``).
        control: the control loop (``submit``, ``release``, ``snapshot``, ``description``).
        video: the VideoHub, or None when no camera is configured.

    Attributes:
        counters: ``received``, ``executed``, ``rejected`` (bad messages), ``refused`` (valid
            commands the control loop refused), ``frames_sent``, ``sessions`` (tabs opened).
        control_of_tabs: which tab drives (:class:`Control`).
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
        self.gate = TokenGate(self.settings.token, self.settings.port)
        self.counters = {"received": 0, "executed": 0, "rejected": 0, "refused": 0, "frames_sent": 0, "sessions": 0}
        self.warn = RateLimitedLog(log, 10.0)
        #: the other links' trouble, one sentence each, shown on the page (set by the app)
        self.link_warnings: Callable[[], list[str]] = list
        self.control_of_tabs = Control()
        self._tab_ids = 0
        self.sessions: set[Session] = set()
        self.port: int | None = None
        self.routes: list[web.RouteDef] = []    # more routes behind the same gate (agent.recorder.web)
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

    def warnings(self) -> list[str]:
        """Trouble an operator should read, one sentence each (the console shows them); [] when none."""
        return []

    def status(self) -> LinkStatus:
        """The console's :class:`~agent.ports.LinkStatus`: ``connected`` while listening (a console
        that cannot bind is a link down), the counters, ``open`` (tabs connected now),
        ``auth_refused`` (401/403/421 answers) and ``auth_throttled`` (429 answers: a client
        backing off after wrong tokens); detail ``url`` and ``video`` (:meth:`video_stats`)."""
        return self.link.status(SOURCE, {**self.counters, "open": len(self.sessions),
                                         "auth_refused": self.gate.refused,
                                         "auth_throttled": self.gate.throttle.throttled},
                                {"url": self.url(), "video": self.video_stats()}, connected=self.ready.is_set())

    def video_stats(self) -> dict[str, dict[str, Any]]:
        """Per open tab with video (by tab id): what its link carries and frame ages
        (:meth:`agent.console.video.TabVideo.stats`)."""
        return {str(s.id): s.video.stats() for s in self.sessions if s.video is not None}

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
        app.add_routes(self.routes)
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
        self._tab_ids += 1
        session = Session(self, ws, str(request.remote), self._tab_ids, request.transport)
        self.sessions.add(session)
        self.counters["sessions"] += 1
        log.info("console: tab %d opened from %s (%d open)", session.id, session.peer, len(self.sessions))
        if self.control_of_tabs.holder is None:
            self._grant(session, "the first tab while no tab holds control", press_needed=False)
        try:
            await session.run()
        finally:
            self.sessions.discard(session)
            self._closed(session)
            await ws.close()
        return ws

    def _closed(self, session: Session) -> None:
        ctl = self.control_of_tabs
        if ctl.holder is session:
            ctl.holder = None
            self.control.release(SOURCE, f"console tab {session.id} from {session.peer} closed")
            self._tell_all()
        log.info("console: tab %d from %s closed (%d open)", session.id, session.peer, len(self.sessions))

    def _grant(self, session: Session, why: str, press_needed: bool = True) -> None:
        ctl = self.control_of_tabs
        ctl.holder, ctl.since_unix_s = session, time.time()
        ctl.press_needed, ctl.stopped_by = press_needed, "this tab just took control"
        log.info("console: tab %d (%s) holds control: %s", session.id, session.peer, why)
        self._tell_all()

    def take(self, session: Session) -> None:
        """``session`` takes control: the previous holder's motion ends at once (the source is
        released) and every tab is told."""
        ctl = self.control_of_tabs
        previous = ctl.holder
        if previous is session:
            return
        if previous is not None:
            self.control.release(SOURCE, f"console tab {session.id} took control from tab {previous.id}")
            previous.notify(f"tab {session.id} ({session.peer}) took control at {clock_text(time.time())}; "
                            f"this tab watches now")
        self._grant(session, f"taken from tab {previous.id}" if previous is not None else "taken")

    def stopped(self, session: Session, what: str = "stop") -> None:
        """A stop (or e-stop) from ``session``. From a watching tab, the tab in control drives again
        only once it let go or pressed anew; the tab in control itself is the stopper and drives
        with its next command (its page sends nothing more until a new press: docs/safety.md)."""
        ctl = self.control_of_tabs
        if ctl.holder is None or ctl.holder is session:
            return
        ctl.press_needed = True
        ctl.stopped_by = f"{what} from tab {session.id} ({session.peer}) at {clock_text(time.time())}"

    def may_drive(self, session: Session, press: bool) -> None:
        """Raise CommandDeclined with the reason when ``session`` may not drive now."""
        why = self.control_of_tabs.refusal(session, press)
        if why is not None and self.control_of_tabs.holder is session:
            # a halt outranks "press again": say what holds the tank
            halts = [h for h in self.control.snapshot().safety.halts if not h.cleared]
            if halts:
                why = f"{describe_halt(halts[0])}; no motion until it is released"
        if why is not None:
            kind = "watching" if self.control_of_tabs.holder is not session else "press"
            self.warn.log(logging.INFO, ("declined", session.id, kind), "console: drive from tab %d (%s) refused: %s",
                          session.id, session.peer, why)
            raise CommandDeclined(why, SOURCE)

    def _tell_all(self) -> None:
        for tab in list(self.sessions):
            tab.control_changed()

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
