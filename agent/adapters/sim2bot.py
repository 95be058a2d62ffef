"""Sim2Bot adapter: the robot is the *simulator* side of a Sim2Bot bridge.

The agent connects to the bridge's control socket (``cfg.sim2bot.url``),
announces the tank in a ``hello`` with ``role: "simulator"`` (the bridge caches
it and serves it to controllers' ``describe``; it forgets it when we drop, so
every reconnect re-announces), sends ``telemetry`` at ``telemetry_hz`` and
executes the controller commands the bridge relays. Camera frames go to the
sibling ``/video`` socket (:mod:`agent.adapters.sim2bot_video`).

Liveness: both sockets send a WebSocket ping every ``ping_interval_s`` (2 s) and
drop the link when the pong has not come ``ping_timeout_s`` (3 s) later; with the
closing handshake bounded to :data:`CLOSE_S` a dead bridge is noticed within
``ping_interval_s + ping_timeout_s + CLOSE_S`` (5.5 s by default), the source is
released and the adapter reconnects (a new socket: nothing held is replayed).

Translation only: :mod:`agent.adapters.sim2bot_commands` maps messages onto
agent.model commands submitted as source ``sim2bot``;
:mod:`agent.adapters.sim2bot_telemetry` maps snapshots onto packets. On
disconnect the source is released, so whatever it drove stops at once.

Source: ``sim2bot-bridge-protocol-v1.md``; peers ``sim2bot.bridge_server``
(the relay) and ``sim2bot.Robot`` (the controller client). See docs/sim2bot.md.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qsl, urlencode, urlparse, urlunparse

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus, WebSocketException

from agent.adapters.sim2bot_commands import (
    COMMAND_TYPES,
    CameraRequest,
    ParseContext,
    Parsed,
    Submit,
    decode,
    normalize_room,
    parse,
)
from agent.adapters.sim2bot_telemetry import TelemetryBuilder, camera_ids, hello_message
from agent.config import AgentConfig
from agent.config.robotmsg import is_local_address
from agent.errors import CommandDeclined, CommandError
from agent.ports import LinkStatus, RobotPort, VideoPort
from agent.ratelimit import RateLimitedLog, safe
from agent.reconnect import Reconnector, backoff_s  # noqa: F401  (backoff_s: re-exported)

log = logging.getLogger(__name__)

SOURCE = "sim2bot"
#: Largest WebSocket message the transport accepts (the bridge's own uvicorn limit is 16 MiB);
#: the logical limit is ``cfg.sim2bot.max_message_bytes``, checked without dropping the link.
TRANSPORT_MAX_BYTES = (16 << 20) + (64 << 10)
#: Messages longer than this are decoded and parsed off the event loop.
OFFLOAD_BYTES = 64 << 10
#: Identical warnings are repeated at most this often, s.
WARN_REPEAT_S = 10.0
#: Longest a socket's closing handshake may take before the transport is dropped, s.
CLOSE_S = 0.5
#: Errors that end a session as a link fault (anything else is a bug, logged with its traceback).
LINK_ERRORS = (OSError, WebSocketException, TimeoutError)


def refused(err: BaseException) -> bool:
    """The bridge refused the robot on purpose (HTTP 401/403 on the upgrade: a missing or wrong
    token), not a network fault: retried after ``refused_delay_s`` with one WARNING."""
    return isinstance(err, InvalidStatus) and err.response.status_code in (401, 403)


def video_url(control_url: str) -> str:
    """The ``/video`` sibling of a control URL (``.../ws`` -> ``.../video``), query kept."""
    parsed = urlparse(control_url)
    path = parsed.path
    path = path[: -len("/ws")] + "/video" if path.endswith("/ws") else path.rstrip("/") + "/video"
    return urlunparse(parsed._replace(path=path))


def is_loopback(url: str) -> bool:
    """The URL's host is loopback (``localhost``, 127/8, ::1)."""
    return is_local_address(url)


def with_query(url: str, **params: str | None) -> str:
    """``url`` with the given query parameters added (None values left out)."""
    parsed = urlparse(url)
    query = parse_qsl(parsed.query, keep_blank_values=True)
    query += [(k, v) for k, v in params.items() if v]
    return urlunparse(parsed._replace(query=urlencode(query)))


class Sim2botAdapter:
    """The agent on a Sim2Bot bridge, in the simulator role.

    Args:
        cfg: the agent config; ``cfg.sim2bot`` is this adapter's section.
        robot: the RobotPort (``agent.control.ControlLoop``).
        video: the VideoHub, or None when no camera is configured.
        config_path: unused (the interface shared by every adapter).
        clock, sleep: monotonic clock (s) and pause coroutine of the telemetry loop and the
            reconnect pauses (injected in tests).
    """

    def __init__(self, cfg: AgentConfig, robot: RobotPort, video: VideoPort | None, *,
                 config_path: str | None = None, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> None:
        self._cfg = cfg
        self._s = cfg.sim2bot
        self._robot = robot
        self._video = video
        desc = robot.description
        global_ids = camera_ids(desc)
        self._room = normalize_room(self._s.room)
        self._ctx = ParseContext(dof=desc.dof, has_gripper=desc.has_gripper,
                                 cameras=global_ids if video is not None else (), room=self._room)
        self._hello = json.dumps(hello_message(desc, cfg))
        self._desc = desc
        self._streams = None
        if video is not None and global_ids:
            from agent.adapters.sim2bot_video import SendBudget, VideoStreams
            by_id = {c.id: c for c in cfg.drivers.cameras}
            self._streams = VideoStreams(
                video, {g: (cid, by_id[cid]) for g, cid in zip(global_ids, desc.cameras) if cid in by_id},
                self._s.subscription_ttl_s, max_age_s=cfg.video.max_frame_age_s,
                budget=SendBudget.from_config(cfg.video))
        self._warn = RateLimitedLog(log, WARN_REPEAT_S)
        self._noted: set[str] = set()
        self._control_url = with_query(self._s.url, room=self._s.room,
                                       token=self._s.token if self._s.token_in_query else None)
        self._video_url = video_url(self._control_url)
        self._headers = {"Authorization": f"Bearer {self._s.token}"} if self._s.token else None
        self._connected = False
        self._video_connected = False
        self._controllers: int | None = None
        self._link = Reconnector(f"sim2bot: bridge at {self._s.url}", log, first_s=self._s.reconnect_delay_s,
                                 max_s=self._s.reconnect_delay_max_s, refused=refused,
                                 refused_s=self._s.refused_delay_s, clock=clock, sleep=sleep)
        self._video_reconnect = Reconnector(f"sim2bot: video socket to {video_url(self._s.url)}", log,
                                            first_s=self._s.reconnect_delay_s, max_s=self._s.reconnect_delay_max_s,
                                            clock=clock, sleep=sleep)
        self._clock, self._sleep = clock, sleep
        self._counters = {"received": 0, "executed": 0, "rejected": 0, "declined": 0, "camera": 0,
                          "status": 0, "sent": 0, "connects": 0}

    # ------------------------------------------------------------------ health
    def status(self) -> LinkStatus:
        """Connection state and counters, for health reports.

        Counters: ``received``, ``executed``, ``rejected``, ``declined``, ``camera``, ``status``,
        ``sent`` (telemetry packets), ``connects``, ``frames_sent``, ``streams`` (active now).
        Detail: ``video_connected``, ``url`` (without token), ``room``, ``controllers`` (last
        ``bridge_status``), ``video`` (frame ages per stream, VideoStreams.stats). ``last_error``: the newest control-socket failure.
        """
        streams = self._streams
        counters = {**self._counters, "frames_sent": streams.frames_sent if streams else 0,
                    "streams": len(streams.active) if streams else 0}
        detail = {"video_connected": self._video_connected, "url": self._s.url, "room": self._room,
                  "controllers": self._controllers, "video": streams.stats() if streams else {}}
        return self._link.status(SOURCE, counters, detail, connected=self._connected)

    # ------------------------------------------------------------------ run
    def _connect(self, url: str, max_size: int) -> connect:
        return connect(url, additional_headers=self._headers, open_timeout=self._s.connect_timeout_s,
                       max_size=max_size, compression=None, ping_interval=self._s.ping_interval_s,
                       ping_timeout=self._s.ping_timeout_s, close_timeout=CLOSE_S,
                       proxy=None if is_loopback(url) else True)

    async def run(self) -> None:
        """Connect, announce, serve; reconnect forever with jittered capped backoff. Never raises
        on peer or network errors; returns only by cancellation."""
        if not is_loopback(self._s.url):
            if not self._s.token:
                log.warning("sim2bot: %s is not loopback and no token is configured; the bridge "
                            "will refuse the connection", self._s.url)
            elif urlparse(self._s.url).scheme == "ws":
                log.warning("sim2bot: the bridge token travels unencrypted over ws:// to %s", self._s.url)
        await self._link.run(self._control_session, errors=LINK_ERRORS)

    async def _control_session(self) -> None:
        async with self._connect(self._control_url, TRANSPORT_MAX_BYTES) as ws:
            self._link.up()
            await self._session(ws)

    async def _session(self, ws: ClientConnection) -> None:
        await ws.send(self._hello)
        self._connected = True
        self._counters["connects"] += 1
        self._controllers = None
        log.info("sim2bot: connected to %s as simulator (room %s), announced %r: dof %d, %d camera(s)",
                 self._s.url, self._room, self._desc.name, self._desc.dof, len(self._ctx.cameras))
        tasks = [asyncio.create_task(self._read(ws), name="sim2bot-read"),
                 asyncio.create_task(self._telemetry(ws), name="sim2bot-telemetry")]
        if self._streams is not None:
            tasks.append(asyncio.create_task(self._video_link(), name="sim2bot-video-link"))
        reason = "bridge connection closed"
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                err = task.exception()
                if err is not None:
                    reason = f"bridge connection lost: {type(err).__name__}: {err}"
                    if not isinstance(err, LINK_ERRORS):
                        raise err
        except asyncio.CancelledError:
            reason = "agent shutting down"
            raise
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if self._streams is not None:
                self._streams.close()
            self._connected = False
            self._robot.release(SOURCE, reason)
            log.warning("sim2bot: disconnected from %s (%s); released source %s", self._s.url, reason, SOURCE)

    # ------------------------------------------------------------------ commands
    async def _read(self, ws: ClientConnection) -> None:
        async for raw in ws:
            if isinstance(raw, str) and len(raw) > OFFLOAD_BYTES:
                outcome = await asyncio.to_thread(self._interpret, raw)
            else:
                outcome = self._interpret(raw)
            self._apply(*outcome)

    def handle_message(self, raw: str | bytes) -> str:
        """Handle one control-socket message synchronously (event loop thread).

        Returns:
            ``executed``, ``camera``, ``declined``, ``rejected`` or ``status``.
        """
        return self._apply(*self._interpret(raw))

    def _interpret(self, raw: str | bytes) -> tuple[str, Parsed | dict | CommandError]:
        """Decode and parse; thread-safe (reads only immutable state)."""
        kind = "message"
        try:
            message = decode(raw, self._s.max_message_bytes)
            kind = safe(message.get("type"), 64)  # untrusted: escaped before it reaches a log line
            if kind in ("bridge_status", "scene"):
                return kind, message
            return kind, parse(message, self._ctx)
        except CommandError as err:
            return kind, err

    def _apply(self, kind: str, outcome: Parsed | dict | CommandError) -> str:
        self._counters["received"] += 1
        if isinstance(outcome, dict):
            self._counters["status"] += 1
            if kind == "bridge_status":
                self._bridge_status(outcome)
            return "status"
        if isinstance(outcome, CommandDeclined):  # valid, does nothing on a tank
            self._counters["declined"] += 1
            self._warn.log(logging.INFO, self._key(kind, outcome), "sim2bot: %s accepted but ignored: %s", kind, outcome)
            return "declined"
        try:
            if isinstance(outcome, CommandError):
                raise outcome
            if isinstance(outcome, Submit):
                return self._submit(kind, outcome)
            if isinstance(outcome, CameraRequest):
                if self._streams is not None:  # else ctx.cameras is empty and parse rejected it
                    self._streams.subscribe(outcome)
            elif self._streams is not None:  # CameraRelease
                self._streams.unsubscribe(outcome.camera)
            self._counters["camera"] += 1
            return "camera"
        except CommandError as err:  # bad input, or a subscription the streams refuse
            self._counters["rejected"] += 1
            self._warn.log(logging.WARNING, self._key(kind, err), "sim2bot: rejected %s: %s", kind, err)
            return "rejected"

    @staticmethod
    def _key(kind: str, err: CommandError) -> tuple[str, str, str]:
        """Rate-limit key of a rejection: source, reason and the message type when it is a known one
        (a bounded set), so junk with ever-new types or texts still costs one line per reason."""
        return SOURCE, err.reason, kind if kind in COMMAND_TYPES else "?"

    def _submit(self, kind: str, outcome: Submit) -> str:
        try:
            self._robot.submit(SOURCE, outcome.command)
        except CommandError as err:  # the control loop logs its own rejections
            self._counters["rejected"] += 1
            log.debug("sim2bot: %s refused by the robot: %s", kind, err)
            return "rejected"
        for name in outcome.ignored:
            self._note(f"ignored:{name}", logging.WARNING,
                       f"sim2bot: base_velocity {name} ignored: a tracked base moves only along x and yaw")
        self._counters["executed"] += 1
        return "executed"

    def _note(self, key: str, level: int, text: str) -> None:
        if key not in self._noted:
            self._noted.add(key)
            log.log(level, "%s", text)

    def _bridge_status(self, message: dict) -> None:
        count = message.get("controllers")
        if isinstance(count, bool) or not isinstance(count, int):
            return
        before, self._controllers = self._controllers, count
        if before != count:
            log.info("sim2bot: %d controller(s) on the bridge in room %s", count, self._room)
        if count == 0 and before:
            self._robot.release(SOURCE, "the last controller left the bridge")

    # ------------------------------------------------------------------ telemetry
    async def _telemetry(self, ws: ClientConnection) -> None:
        builder = TelemetryBuilder(self._desc, self._s.robot_id, self._room)
        clock = self._clock
        period = 1.0 / self._s.telemetry_hz
        limit = self._s.max_samples
        last_seq = self._robot.snapshot().seq
        due = clock()
        while True:
            due += period
            delay = due - clock()
            if delay > 0:
                await self._sleep(delay)
            else:
                due = clock()  # fell behind: skip, never burst
            batch = self._robot.samples_since(last_seq, limit)
            newest = self._robot.snapshot() if len(batch) >= limit or not batch else batch[-1]
            last_seq = max(last_seq, newest.seq)
            await ws.send(json.dumps(builder.build(newest, batch)))
            self._counters["sent"] += 1

    # ------------------------------------------------------------------ video
    async def _video_link(self) -> None:
        await self._video_reconnect.run(self._video_session, errors=LINK_ERRORS)

    async def _video_session(self) -> None:
        assert self._streams is not None
        hello = {"type": "hello", "role": "simulator-video"}
        if self._s.room:
            hello["room"] = self._s.room
        try:
            async with self._connect(self._video_url, 1 << 20) as vws:
                await vws.send(json.dumps(hello))
                self._streams.attach(vws.send)
                self._video_connected = True
                self._video_reconnect.up()
                log.info("sim2bot: video socket connected to %s", video_url(self._s.url))
                await vws.wait_closed()
                log.warning("sim2bot: video socket closed; reconnecting")
        finally:
            self._streams.attach(None)
            self._video_connected = False
