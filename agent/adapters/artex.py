"""ARTEX robot role: the agent as an ``artex-robot`` SDK robot on an ARTEX Socket.IO hub.

Protocol (``artex-robot`` 0.1.1 and the ARTEX page "Протокол обмена с сервером";
docs/artex.md has the tables):

- connect ``{server}:{port}``, namespace ``/robot``, ``auth`` = passport
  ``{name, type, telem_can, video_can}``;
- the hub *calls* ``heartbeat`` with a list of requests: ``d_meta`` ->
  ``{sid, ready, telem_run, video_run}`` (the state once the whole list is handled,
  as the SDK's shared dict shows it), ``Ready`` -> ``"ok"`` and the telemetry and
  video streams start; ``token_ask`` -> the ``/robot`` sid;
- ``command`` events (only once ready): motion (agent.adapters.artex_commands),
  ``file`` (the :class:`agent.support.logtail.LogTail`) and ``web_settings``
  (agent.adapters.artex_settings);
- ``telem`` (agent.adapters.artex_telem) and ``video`` (camera id -> JPEG bytes)
  at most every ``max_send_freq`` seconds, only what changed.

Unlike the SDK (5 attempts), the adapter reconnects forever with jittered,
capped backoff (``artex.reconnect_delay_s`` .. ``artex.reconnect_delay_max_s``;
``artex.refused_delay_s`` after the hub refused or kicked the robot); after a
reconnect ``ready`` is ``init`` again and the streams wait for the next ``Ready``.
Liveness: a WebSocket ping after ``artex.ping_interval_s`` of silence, the link
dropped at 1.5 x that. When the link drops the adapter releases its source at
once, so the robot stops if ARTEX was driving. Hub packets are checked by
:class:`agent.adapters.artex_client.HubClient`; a stop in a command comes first. Motion commands are velocity commands under
the control loop's watchdog: the hub must repeat them (every 100-200 ms).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import socketio
from socketio.exceptions import SocketIOError

from agent.adapters.artex_client import HubClient, HubRefused, KickCounter, unresolved_hint
from agent.adapters.artex_commands import (
    FileRequest,
    WebSettings,
    describe,
    file_answer,
    is_stop,
    is_stop_event,
    parse_command,
)
from agent.adapters.artex_settings import accept_settings
from agent.adapters.artex_streams import ArtexStreams
from agent.config import AgentConfig
from agent.errors import CommandDeclined, CommandError
from agent.support.logtail import LogTail
from agent.commands import Stop
from agent.ports import LinkStatus, RobotPort, VideoPort
from agent.support.ratelimit import RateLimitedLog, safe
from agent.support.reconnect import Reconnector

log = logging.getLogger(__name__)

__all__ = ["NAMESPACE", "SOURCE", "ArtexAdapter"]

NAMESPACE = "/robot"
SOURCE = "artex"
READY_INIT, READY_OK = "init", "ok"
#: Most requests one heartbeat may carry.
MAX_HEARTBEAT_REQUESTS = 16
#: Identical warnings within this many seconds are logged once (with a repeat count later).
LOG_REPEAT_S = 10.0
#: Errors of a connection attempt that count as a link failure (retried with backoff).
LINK_ERRORS = (SocketIOError, OSError, ValueError, TimeoutError)
#: Longest a client's close may take (polite disconnect, then the transport is dropped), s.
CLOSE_S = 0.5


class ArtexAdapter:
    """The ARTEX robot role. See the module docstring.

    Args:
        cfg: the agent configuration (SDK top-level keys, ``artex`` section).
        robot: the RobotPort (agent.control.ControlLoop): ``submit``, ``release``, ``snapshot``,
            ``set_limits``.
        video: the shared agent.video.VideoHub, or None (no cameras: no video stream).
        config_path: params.json to persist ``web_settings`` into (None: applied, not persisted).
        logs: the log tail served to ``file`` requests (None: empty answers).
        clock, sleep: monotonic clock (s) and pause coroutine of the streams and the reconnect
            pauses (injected in tests; None: asyncio's, the telem stream's on the shared wake-up
            grid, agent/adapters/artex_streams.py).
    """

    def __init__(self, cfg: AgentConfig, robot: RobotPort, video: VideoPort | None = None, *,
                 config_path: str | None = None, logs: LogTail | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[object]] | None = None) -> None:
        self._cfg = cfg
        self._robot = robot
        self._config_path = config_path
        self._logs = logs
        self._client: socketio.AsyncClient | None = None
        self._gone: asyncio.Event | None = None
        self._sid: str | None = None
        self._ready = READY_INIT
        self._told_not_ready = False
        self._end_reason = ""
        self._kicks = KickCounter(clock)
        self._settings_lock: asyncio.Lock | None = None
        self._throttle = RateLimitedLog(log, LOG_REPEAT_S)
        self.counters: Counter[str] = Counter()
        self._streams = ArtexStreams(cfg, robot, video, self._emit, lambda: self._client, self.counters,
                                     clock=clock, sleep=sleep)
        self._link = Reconnector(f"ARTEX: connection to {self.url}", log, first_s=cfg.artex.reconnect_delay_s,
                                 max_s=cfg.artex.reconnect_delay_max_s, refused=lambda e: isinstance(e, HubRefused),
                                 refused_s=cfg.artex.refused_delay_s, hint=lambda err: unresolved_hint(self._cfg.server, err),
                                 clock=clock, sleep=sleep or asyncio.sleep)

    # ------------------------------------------------------------------ public
    @property
    def url(self) -> str:
        """Hub URL, ``{server}:{port}`` as the SDK builds it."""
        return f"{str(self._cfg.server).rstrip('/')}:{self._cfg.port}"

    @property
    def cfg(self) -> AgentConfig:
        """The configuration in force (replaced by accepted ``web_settings``)."""
        return self._cfg

    def passport(self) -> dict[str, Any]:
        """The ``auth`` object sent on connect: ``{name, type, telem_can, video_can}``."""
        c = self._cfg
        return {"name": c.name, "type": c.type, "telem_can": c.telem_can, "video_can": c.video_can}

    def d_meta(self) -> dict[str, Any]:
        """The ``d_meta`` heartbeat answer: ``{sid, ready, telem_run, video_run}``."""
        return {"sid": self._sid, "ready": self._ready,
                "telem_run": self._streams.telem_run, "video_run": self._streams.video_run}

    def warnings(self) -> list[str]:
        """Trouble an operator should read, one sentence each (the console shows them); [] when none."""
        return []

    def status(self) -> LinkStatus:
        """Health view: counters (received, accepted, rejected, ignored, sent_*, connects,
        disconnects, connect_failures...) and detail ``url``, ``sid``, ``ready``, ``telem_run``,
        ``video_run``, ``video`` (delivery figures, :meth:`ArtexStreams.video_stats`)."""
        client = self._client
        return self._link.status(SOURCE, dict(self.counters),
                                 {"url": self.url, **self.d_meta(), "video": self._streams.video_stats()},
                                 connected=bool(client is not None and client.connected))

    async def run(self) -> None:
        """Connect, serve, reconnect forever (agent.support.reconnect). Returns only by cancellation; never
        raises on link errors (an unexpected exception propagates to the agent, which logs it)."""
        self._settings_lock = asyncio.Lock()
        self._apply_speed_limit()
        self._streams.warn_off(self._config_path or "the configuration")
        try:
            await self._link.run(self._session, errors=LINK_ERRORS)
        finally:
            await self._shutdown()

    async def _session(self) -> None:
        """One connection: connect (bounded), serve until the link drops, close the client (bounded)."""
        client = self._new_client()
        self._gone = asyncio.Event()
        self._end_reason = ""
        timeout = self._cfg.artex.connect_timeout_s
        try:  # the outer bound also covers a hub that never answers the TCP handshake
            async with asyncio.timeout(2 * timeout):
                await client.connect(self.url, auth=self.passport(), namespaces=[NAMESPACE], wait_timeout=timeout)
        except Exception as err:  # any failure of the library's connect (a truncated HTTP answer raises
            # aiohttp.ClientPayloadError or RuntimeError) is a failed attempt, retried with backoff
            self.counters["connect_failures"] += 1
            await client.close(CLOSE_S)
            if client.refusal is not None:
                raise HubRefused(f"namespace {NAMESPACE} rejected; the hub says {client.refusal}") from err
            raise ConnectionError(f"{type(err).__name__}: {safe(str(err), 200)}") from err
        self._link.up()
        self._kicks.up()
        try:
            await self._serve(client)
        except asyncio.CancelledError:
            log.info("ARTEX: disconnecting from %s (agent stopping)", self.url)
            self._link_lost("agent stopping")
            raise
        finally:
            await client.close(CLOSE_S)
        self._kicks.ended(self._end_reason == socketio.AsyncClient.reason.SERVER_DISCONNECT)  # may raise HubRefused

    def _apply_speed_limit(self) -> None:
        limit = self._cfg.artex.max_speed_mps
        if limit is None:
            return
        try:
            self._robot.set_limits(max_speed_mps=limit)
        except CommandError as err:
            log.error("ARTEX: artex.max_speed_mps %s not applied: %s", limit, err)

    # ------------------------------------------------------------------ link
    def _new_client(self) -> HubClient:
        # liveness: aiohttp sends a WebSocket ping after ping_interval_s without inbound data and drops
        # the link when no pong comes within half of that (RFC 6455: every WebSocket stack answers)
        client = HubClient(on_fault=self._on_fault, is_stop_event=is_stop_event, reconnection=False, handle_sigint=False,
                           websocket_extra_options={"heartbeat": self._cfg.artex.ping_interval_s})
        for event, handler in (("connect", self._on_connect), ("disconnect", self._on_disconnect),
                               ("heartbeat", self._on_heartbeat), ("token_ask", self._on_token_ask),
                               ("command", self._on_command), ("*", self._on_other)):
            client.on(event, handler, namespace=NAMESPACE)
        self._client = client
        return client

    async def _serve(self, client: socketio.AsyncClient) -> None:
        """Wait until the link drops (disconnect event, or the transport found closed)."""
        assert self._gone is not None
        while not self._gone.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                async with asyncio.timeout(1.0):
                    await self._gone.wait()
            if not client.connected and not self._gone.is_set():
                self._link_lost("transport closed")

    async def _shutdown(self) -> None:
        client = self._client
        if client is not None:
            self._link_lost("agent stopping")
            await client.close(CLOSE_S)  # a half-open attempt cancelled mid-connect
        await self._streams.close()

    def _link_lost(self, reason: str) -> None:
        if self._gone is None or self._gone.is_set():
            return
        self._gone.set()
        self.counters["disconnects"] += 1
        self._streams.stop()
        self._ready = READY_INIT
        self._sid = None
        self._robot.release(SOURCE, f"ARTEX link to {self.url} lost: {reason}")
        if reason != "agent stopping":
            log.warning("ARTEX: disconnected from %s (%s); reconnecting", self.url, reason)

    async def _emit(self, event: str, data: dict[str, Any]) -> bool:
        client = self._client
        if client is None or not client.connected:
            return False
        try:
            await client.emit(event, data, namespace=NAMESPACE)
        except (SocketIOError, OSError) as err:
            log.debug("ARTEX: emit %s failed: %s", event, err)
            return False
        self.counters[f"sent_{event}"] += 1
        return True

    def _reject(self, what: str, problem: CommandError | str) -> None:
        """Count and log a rejection, rate-limited by (source, reason): varied junk costs one line per reason."""
        self.counters["rejected"] += 1
        reason = problem.reason if isinstance(problem, CommandError) else "invalid"
        # declined by the robot's state (a stop latch, an e-stop): INFO; a malformed message: WARNING
        level = logging.INFO if isinstance(problem, CommandDeclined) else logging.WARNING
        self._throttle.log(level, (SOURCE, what, reason), "ARTEX: rejected %s: %s", what, problem)

    def _on_fault(self, kind: str, detail: str, what: str = "") -> None:
        """A hub message the client discarded (artex_client.HubClient): counted, logged once per kind
        (``what`` of those held back named in the next line: ``key 'vx'``)."""
        self.counters["received"] += 1
        self.counters["rejected"] += 1
        self.counters[f"fault_{kind}"] += 1
        self._throttle.log(logging.WARNING, (SOURCE, "fault", kind), "ARTEX: discarded a message from the hub "
                           "(%s): %s", kind, detail, detail=what)

    # ------------------------------------------------------------------ handlers
    async def _on_connect(self) -> None:
        client = self._client
        self._sid = client.get_sid(NAMESPACE) if client is not None else None
        self._ready = READY_INIT
        self._told_not_ready = False
        self._streams.new_link()
        self.counters["connects"] += 1
        log.info("ARTEX: connected to %s as %r (sid %s); waiting for Ready", self.url, self._cfg.name, self._sid)

    async def _on_disconnect(self, reason: object = None) -> None:
        self._end_reason = str(reason or "")
        self._link_lost(safe(reason or "server disconnect", 80))

    async def _on_other(self, event: object, *args: object) -> None:
        self.counters["received"] += 1
        self._reject("event", f"unknown event {describe(event)}")

    async def _on_token_ask(self, *args: object) -> str | None:
        self.counters["received"] += 1
        return self._sid

    async def _on_heartbeat(self, *args: object) -> dict[str, Any]:
        self.counters["received"] += 1
        requests = args[0] if len(args) == 1 else args
        if not isinstance(requests, list):
            self._reject("heartbeat", f"data must be a list of requests, got {describe(requests)}")
            return {}
        if len(requests) > MAX_HEARTBEAT_REQUESTS:
            self._reject("heartbeat", f"{len(requests)} requests, at most {MAX_HEARTBEAT_REQUESTS} allowed")
            return {}
        answer: dict[str, Any] = {}
        for req in requests:
            if req == "d_meta":
                answer["d_meta"] = None  # filled below: the state after the whole list, as the SDK shows it
            elif req == "Ready":
                if self._ready != READY_OK:
                    log.info("ARTEX: Ready from the hub; streams on (telem %s, video %s)",
                             self._cfg.telem_can, self._cfg.video_can and self._streams.has_video)
                self._ready = READY_OK
                self._streams.start()
                answer["Ready"] = "ok"
            else:
                self._throttle.log(logging.WARNING, (SOURCE, "heartbeat", "unknown request"),
                                   "ARTEX: unknown heartbeat request %s ignored", describe(req))
        if "d_meta" in answer:
            answer["d_meta"] = self.d_meta()
        return answer

    async def _on_command(self, *args: object) -> None:
        self.counters["received"] += 1
        data = args[0] if len(args) == 1 else list(args)
        if is_stop(data):  # first: before Ready, whatever else the payload holds
            self._obey_stop(data)
            return
        if self._ready != READY_OK:
            self.counters["ignored"] += 1
            level = logging.DEBUG if self._told_not_ready else logging.INFO
            self._told_not_ready = True
            log.log(level, "ARTEX: command ignored: not ready (the hub has not sent Ready yet)")
            return
        try:
            cmd = parse_command(data, self._cfg.artex.commands)
        except CommandError as err:
            self._reject("command", err)
            return
        action = cmd.action
        if cmd.ignored:  # the SDK obeys the first key too; a hub UI that adds keys should know they do nothing
            self.counters["ignored_keys"] += 1
            self._throttle.log(logging.WARNING, (SOURCE, "command", "ignored keys"),
                               "ARTEX: command %s from %r obeyed; payload keys %s ignored (not command types)",
                               cmd.kind, safe(cmd.author, 64), ", ".join(repr(k) for k in cmd.ignored))
        if isinstance(action, FileRequest):
            await self._on_file(action.kind)
        elif isinstance(action, WebSettings):
            await self._on_web_settings(action, cmd.author)
        else:
            try:
                self._robot.submit(SOURCE, action)
            except CommandError as err:
                self._reject("command", type(err)(f"payload.{cmd.kind}: refused by the robot: {err}",
                                                  SOURCE, err.reason))
                return
            self.counters["accepted"] += 1
            log.debug("ARTEX: %s from %r -> %s", cmd.kind, cmd.author, action)

    def _obey_stop(self, data: object) -> None:
        """Submit the stop (stop always wins: before Ready, with a malformed author or extra keys)."""
        try:
            self._robot.submit(SOURCE, Stop())
        except CommandError as err:  # only a closed control loop refuses a stop
            self._reject("command", err)
            return
        self.counters["accepted"] += 1
        author = data.get("author") if isinstance(data, dict) else None
        log.log(logging.DEBUG if self._ready == READY_OK else logging.INFO, "ARTEX: stop from %s obeyed%s",
                describe(author), "" if self._ready == READY_OK else " before Ready")

    async def _on_file(self, kind: str) -> None:
        self.counters["accepted"] += 1
        logs = self._logs
        if logs is None:
            self._throttle(logging.WARNING, "ARTEX: file request but no log tail is installed; answering empty")
        if kind == "clear":
            if logs is not None:
                logs.clear()
            log.warning("ARTEX: logs cleared by the hub")
            return
        await self._emit("file", {"payload": file_answer(logs, kind, self._cfg.video.max_message_bytes)})

    async def _on_web_settings(self, settings: WebSettings, author: str) -> None:
        assert self._settings_lock is not None
        async with self._settings_lock:
            try:
                new_cfg, changes, where = await accept_settings(self._cfg, settings, self._config_path)
            except CommandError as err:
                self._reject("web_settings", err)
                return
            self._cfg = self._streams.cfg = new_cfg
            if "max_speed_mps" in changes:
                self._apply_speed_limit()
            if self._ready == READY_OK:
                self._streams.stop(telem=not new_cfg.telem_can, video=not new_cfg.video_can)
                self._streams.start()
            self.counters["accepted"] += 1
            log.info("ARTEX: web_settings from %r applied (%s): %s", author, where, changes)
