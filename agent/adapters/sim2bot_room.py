"""One bridge room of the Sim2Bot adapter: its control socket, its ``/video`` socket, its telemetry.

The v1 bridge routes by room (``sim2bot.bridge_server``): a controller's commands go to the
simulator of the message's room, a simulator's telemetry to the controllers of its room, and
every binary message of a ``simulator-video`` socket to every ``controller-video`` socket of
its room. The room is the only unit in which controllers can be told apart, so the adapter
serves each configured room with one :class:`RoomLink` (docs/sim2bot.md, "Two controllers,
two formats").

A RoomLink connects (``?room=``), announces the tank with ``role: "simulator"``, sends
telemetry at ``telemetry_hz``, hands every control message to its owner (the adapter parses
and dispatches) and keeps the room's ``/video`` socket attached to the room's
:class:`agent.adapters.sim2bot_video.VideoStreams`. Each socket has its own Reconnector and
liveness ping, so one room's failing link leaves the other rooms alone.

Source: Sim2Bot bridge protocol v1 (``protocol.md``, sim2bot-python, sim2bot 0.1.0; docs/sim2bot.md) ("Rooms", "Session"); peer ``sim2bot.bridge_server``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qsl, urlencode, urlparse, urlunparse

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus, WebSocketException

from agent.adapters.sim2bot_commands import ParseContext, Parsed, normalize_room
from agent.adapters.sim2bot_telemetry import ChangeGate, TelemetryBuilder, change_key
from agent.compat import websockets as ws_compat
from agent.video.links import transport_backlog
from agent.config.robotmsg import is_local_address
from agent.config.sim2bot import Sim2botConfig
from agent.errors import CommandError
from agent.model import RobotDescription
from agent.ports import LinkStatus, RobotPort
from agent.support import beat
from agent.support.reconnect import Reconnector

if TYPE_CHECKING:  # imported only with cameras: it pulls in the video pipeline (OpenCV)
    from agent.adapters.sim2bot_video import VideoStreams

# the adapter's logger: every line of the Sim2Bot link keeps one source name
log = logging.getLogger("agent.adapters.sim2bot")

SOURCE = "sim2bot"
#: Largest WebSocket message the transport accepts (the bridge's own uvicorn limit is 16 MiB);
#: the logical limit is ``cfg.sim2bot.max_message_bytes``, checked without dropping the link.
TRANSPORT_MAX_BYTES = (16 << 20) + (64 << 10)
#: Messages longer than this are decoded and parsed off the event loop.
OFFLOAD_BYTES = 64 << 10
#: Longest a socket's closing handshake may take before the transport is dropped, s.
CLOSE_S = 0.5
#: Telemetry waits while the control socket still has more than this to write (transport buffer
#: and kernel send queue, SIOCOUTQ), bytes: on a slow path the packet is skipped instead.
TELEMETRY_BACKLOG_BYTES = 4096
#: Share of a slow path's rate (learned by the room's video link, agent.video.LinkRate) telemetry
#: may use: its packets are spaced out to it, the rest carries frames, pings and replies.
TELEMETRY_SHARE = 0.25
#: Errors that end a session as a link fault (anything else is a bug, logged with its traceback).
LINK_ERRORS = (OSError, WebSocketException, TimeoutError)

Outcome = Parsed | dict | CommandError


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


def with_query(url: str, **params: str | None) -> str:
    """``url`` with the given query parameters added (None values left out)."""
    parsed = urlparse(url)
    query = parse_qsl(parsed.query, keep_blank_values=True)
    query += [(k, v) for k, v in params.items() if v]
    return urlunparse(parsed._replace(query=urlencode(query)))


class RoomOwner(Protocol):
    """What a RoomLink asks of the adapter that owns it."""

    def interpret(self, raw: str | bytes, ctx: ParseContext) -> tuple[str, Outcome]:
        """Decode and parse one control message (thread-safe): its type and outcome."""

    def apply(self, link: RoomLink, kind: str, outcome: Outcome) -> str:
        """Act on a parsed message from ``link``'s room (event loop thread); a ``bridge_status``
        goes to :meth:`RoomLink.bridge_status`."""

    def release(self, link: RoomLink, reason: str) -> bool:
        """``link``'s room lost its link or its controllers: release the source if that room
        gave the last command. Returns whether it was released."""


class RoomLink:
    """The adapter's sockets in one bridge room.

    Args:
        name: the room as configured; None = the bridge's default room, no room on the wire.
        s: the ``sim2bot`` config section.
        desc: the robot description. hello: the simulator hello for this room.
        robot: the RobotPort (snapshots for telemetry). owner: the adapter (:class:`RoomOwner`).
        streams: this room's camera streams, or None without cameras.
        cameras: global camera ids a controller may subscribe (empty without video).
        clock, sleep: monotonic clock (s) and pause coroutine (injected in tests). None: the
            telemetry polls end on the event loop's shared wake-up grid (agent.support.beat, at
            most half a slot off, the rate kept), the reconnect pauses as asked.

    Attributes:
        room: the bridge's name of the room (``default`` for None). ctx: the parse context.
        connected, video_connected: the sockets are up. controllers: the last ``bridge_status``
        count of the room (None before one). connects: announces sent. sent: telemetry packets.
        link, video_link: the two sockets' Reconnectors.
    """

    def __init__(self, name: str | None, s: Sim2botConfig, desc: RobotDescription, hello: dict[str, Any],
                 robot: RobotPort, owner: RoomOwner, streams: VideoStreams | None, cameras: tuple[str, ...], *,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[object]] | None = None) -> None:
        self.name, self.room = name, normalize_room(name)
        self._s, self._desc, self._robot, self._owner = s, desc, robot, owner
        self.streams = streams
        self.ctx = ParseContext(dof=desc.dof, has_gripper=desc.has_gripper, cameras=cameras, room=self.room)
        self._hello = json.dumps(hello)
        self._control_url = with_query(s.url, room=name, token=s.token if s.token_in_query else None)
        self._video_url = video_url(self._control_url)
        self._headers = {"Authorization": f"Bearer {s.token}"} if s.token else None
        self.where = s.url if name is None else f"{s.url} (room {self.room})"
        self.connected = self.video_connected = False
        self.controllers: int | None = None
        #: simulators in the room by the last ``bridge_status`` (this agent included), None before one
        self.simulators: int | None = None
        #: the room's trouble in one sentence ("" when none): another simulator takes the commands
        self.warning = ""
        self._reannounce = False
        self.connects = self.sent = 0
        self.telemetry_skipped = 0
        self.telemetry_unchanged = 0
        self._clock, self._sleep = clock, sleep or beat.sleep
        #: the telemetry polls follow the control loop's rest (agent.support.beat.RestPolls)
        self._rest = beat.RestPolls(robot, sleep)
        sleep = sleep or asyncio.sleep
        self.link = Reconnector(f"sim2bot: bridge at {self.where}", log, first_s=s.reconnect_delay_s,
                                max_s=s.reconnect_delay_max_s, refused=refused, refused_s=s.refused_delay_s,
                                clock=clock, sleep=sleep)
        self.video_link = Reconnector(f"sim2bot: video socket to {video_url(s.url)} (room {self.room})", log,
                                      first_s=s.reconnect_delay_s, max_s=s.reconnect_delay_max_s,
                                      clock=clock, sleep=sleep)

    def status(self) -> LinkStatus:
        """This room's link state (counters empty) and detail: ``room``, ``connected``,
        ``video_connected``, ``controllers``, ``connects``, ``sent``, ``telemetry_skipped`` (packets
        not sent: the path was full), ``telemetry_unchanged`` (polls without a packet: nothing changed)."""
        detail = {"room": self.room, "connected": self.connected, "video_connected": self.video_connected,
                  "controllers": self.controllers, "simulators": self.simulators, "warning": self.warning,
                  "connects": self.connects, "sent": self.sent, "telemetry_skipped": self.telemetry_skipped,
                  "telemetry_unchanged": self.telemetry_unchanged}
        return self.link.status(SOURCE, {}, detail, connected=self.connected)

    # ------------------------------------------------------------------ run
    def _connect(self, url: str, max_size: int) -> connect:
        s = self._s
        return connect(url, additional_headers=self._headers, open_timeout=s.connect_timeout_s,
                       max_size=max_size, compression=None, ping_interval=s.ping_interval_s,
                       ping_timeout=s.ping_timeout_s, close_timeout=CLOSE_S,
                       proxy=None if is_local_address(url) else True)

    async def run(self) -> None:
        """Connect, announce, serve; reconnect forever. Returns only by cancellation."""
        await self.link.run(self._control_session, errors=LINK_ERRORS)

    async def _control_session(self) -> None:
        async with self._connect(self._control_url, TRANSPORT_MAX_BYTES) as ws:
            self.link.up()
            await self._session(ws)

    async def _session(self, ws: ClientConnection) -> None:
        await ws.send(self._hello)
        self.connected, self.controllers, self.simulators, self.warning = True, None, None, ""
        self.connects += 1
        log.info("sim2bot: connected to %s as simulator (room %s), announced %r: dof %d, %d camera(s)",
                 self._s.url, self.room, self._desc.name, self._desc.dof, len(self.ctx.cameras))
        tasks = [asyncio.create_task(self._read(ws), name=f"sim2bot-read-{self.room}"),
                 asyncio.create_task(self._telemetry(ws), name=f"sim2bot-telemetry-{self.room}")]
        if self.streams is not None:
            tasks.append(asyncio.create_task(self._video_run(), name=f"sim2bot-video-link-{self.room}"))
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
            if self.streams is not None:
                self.streams.close()
            self.connected = False
            released = self._owner.release(self, reason)
            log.warning("sim2bot: disconnected from %s (%s); %s", self.where, reason,
                        f"released source {SOURCE}" if released else "another room gave the last command")

    # ------------------------------------------------------------------ control messages
    async def _read(self, ws: ClientConnection) -> None:
        async for raw in ws:
            if isinstance(raw, str) and len(raw) > OFFLOAD_BYTES:
                kind, outcome = await asyncio.to_thread(self._owner.interpret, raw, self.ctx)
            else:
                kind, outcome = self._owner.interpret(raw, self.ctx)
            self._owner.apply(self, kind, outcome)

    def bridge_status(self, message: dict) -> None:
        """The bridge's count of this room's controllers and simulators. When the last controller
        left, the owner may release the source at once (no wait for the watchdog). More than one
        simulator (a browser tab of the Sim2Bot app joined the room): the bridge sends every command
        to the newest simulator and answers ``describe`` with its scene, so this tank gets no
        commands: WARNING, :attr:`warning` set (status, console, telemetry). When the others left,
        the tank announces itself again, so ``describe`` answers with the tank."""
        self._simulators(message.get("simulators"))
        count = message.get("controllers")
        if isinstance(count, bool) or not isinstance(count, int):
            return
        before, self.controllers = self.controllers, count
        if before != count:
            log.info("sim2bot: %d controller(s) on the bridge in room %s", count, self.room)
        if count == 0 and before:
            self._owner.release(self, "the last controller left the bridge")

    def _simulators(self, count: object) -> None:
        if isinstance(count, bool) or not isinstance(count, int):
            return
        before, self.simulators = self.simulators, count
        if count > 1 and count != before:
            self.warning = (f"{count} simulators in bridge room {self.room}: the bridge sends every command to "
                            "the simulator that joined last and answers describe with its robot, so this tank "
                            "gets no commands while another simulator (a Sim2Bot browser tab) is there; close "
                            "it, or give the agent a room of its own (sim2bot.room)")
            log.warning("sim2bot: %s", self.warning)
            self._rest.fire()       # a resting tank's telemetry poll carries it now
        elif count <= 1 and before is not None and before > 1:
            self.warning = ""
            self._reannounce = True
            self._rest.fire()
            log.warning("sim2bot: the other simulator(s) left bridge room %s; announcing the tank again, "
                        "commands reach it", self.room)

    # ------------------------------------------------------------------ telemetry
    async def _telemetry(self, ws: ClientConnection) -> None:
        """Every ``1 / telemetry_hz`` s: a packet when the robot changed beyond noise since the last one
        (sim2bot_telemetry.ChangeGate) or ``telemetry_keepalive_s`` passed; its
        ``samples`` are the ticks since the last packet (at most ``max_samples``). While the control loop
        rests, the polls before its next rest tick are skipped (they would find no new snapshot), never
        a keepalive's; a tick woken at rest, a new warning or announce polls at once (docs/sim2bot.md,
        "Telemetry")."""
        builder = TelemetryBuilder(self._desc, self._s.robot_id, self.room)
        clock, robot = self._clock, self._robot
        period = 1.0 / self._s.telemetry_hz
        keepalive = self._s.telemetry_keepalive_s
        gate = ChangeGate()
        seen: tuple = (None, None, None, True)   # (snapshot, warning, its key, due): a snapshot looked at again
        limit = self._s.max_samples
        last_seq = robot.snapshot().seq
        last_sent = -float("inf")
        rest, snap = self._rest, None
        due = clock()
        while True:
            due += period
            skipped = 0
            # the loop rests: no poll before its next tick, nor past a keepalive's; none skipped while a packet
            # waits (the path was full) or a re-announce
            if snap is not None and not self._reannounce and not (seen[0] is not None and seen[3]):
                due, skipped = rest.skip_to(due, period, snap, last_sent + keepalive - 1e-6)
            delay = due - clock()
            if delay <= 0:
                due = clock()  # fell behind: skip, never burst
            elif skipped or rest.rests(snap, delay):    # at rest (polls skipped, or the schedule's own next)
                if await rest.wait(delay):      # roused: a tick woken at rest (a command) published its snapshot
                    due = clock()
            else:
                await self._sleep(delay)
            rest.note()
            snap, warning = robot.snapshot(), self.warning
            if snap is not seen[0] or warning != seen[1]:  # a new tick or warning (a resting loop ticks at ~7 Hz)
                key = change_key(snap, warning)
                seen = (snap, warning, key, gate.due(key))
            key, changed = seen[2], seen[3]
            if not (self._reannounce or clock() - last_sent >= keepalive - 1e-6 or changed):
                self.telemetry_unchanged += 1
                continue
            if transport_backlog(ws_compat.transport(ws)) > TELEMETRY_BACKLOG_BYTES:
                # the path is slower than telemetry: this packet is skipped (the next one carries the
                # samples since the last sent), so pongs and replies never queue behind old telemetry
                self.telemetry_skipped += 1
                continue
            batch = robot.samples_since(last_seq, limit)
            newest = robot.snapshot() if len(batch) >= limit or not batch else batch[-1]
            last_seq = max(last_seq, newest.seq)
            if self._reannounce:
                self._reannounce = False
                await ws.send(self._hello)   # the bridge's scene is the tank's again (describe)
            packet = builder.text(newest, batch, self.warning)     # json.dumps of builder.build(...), for less
            await ws.send(packet)
            gate.mark_sent(key)
            seen = (None, None, None, True)     # the gate's reference moved: look again
            last_sent = clock()
            self.sent += 1
            rate = self.streams.rate.bps if self.streams is not None else None
            if rate is not None:    # a slow path (the video link learned its rate): telemetry takes its share
                due = max(due, clock() + len(packet) / (TELEMETRY_SHARE * rate) - period)

    # ------------------------------------------------------------------ video
    async def _video_run(self) -> None:
        await self.video_link.run(self._video_session, errors=LINK_ERRORS)

    async def _video_session(self) -> None:
        assert self.streams is not None
        hello = {"type": "hello", "role": "simulator-video"}
        if self.name:
            hello["room"] = self.name
        try:
            async with self._connect(self._video_url, 1 << 20) as vws:
                await vws.send(json.dumps(hello))
                self.streams.attach(vws.send)
                self.video_connected = True
                self.video_link.up()
                log.info("sim2bot: video socket connected to %s (room %s)", video_url(self._s.url), self.room)
                await vws.wait_closed()
                log.warning("sim2bot: video socket closed (room %s); reconnecting", self.room)
        finally:
            self.streams.attach(None)
            self.video_connected = False
