"""Sim2Bot adapter: the robot is the *simulator* side of a Sim2Bot bridge.

The agent connects to the bridge's control socket (``cfg.sim2bot.url``),
announces the tank in a ``hello`` with ``role: "simulator"`` (the bridge caches
it and serves it to controllers' ``describe``; it forgets it when we drop, so
every reconnect re-announces), sends ``telemetry`` at ``telemetry_hz`` and
executes the controller commands the bridge relays. Camera frames go to the
sibling ``/video`` socket (:mod:`agent.adapters.sim2bot_video`).

Rooms: the bridge routes commands, telemetry and video per room, so the adapter
joins every room of ``cfg.sim2bot.served_rooms`` with its own pair of sockets
(:class:`agent.adapters.sim2bot_room.RoomLink`) and its own camera streams: a
controller gets only the formats subscribed in its room. Commands from every room
are the one source ``sim2bot`` (priorities and watchdog as for one controller; a
``stop`` from any room stops the tank). The control loop cannot tell
rooms apart, so the adapter keeps the stop latch between them
(:class:`agent.control.stoplatch.SenderLatch`, docs/safety.md): after one room's stop, another
room that was streaming velocity commands is refused until it re-engages. A room whose
link drops, or whose last controller leaves, releases the source when it gave the last
command.

Liveness: every socket sends a WebSocket ping every ``ping_interval_s`` (2 s) and
drops the link when the pong has not come ``ping_timeout_s`` (3 s) later; with the
closing handshake bounded to ``sim2bot_room.CLOSE_S`` (0.5 s) a dead bridge is noticed within
``ping_interval_s + ping_timeout_s + CLOSE_S`` (5.5 s by default), the source is
released and the room reconnects (a new socket: nothing held is replayed).

Translation only: :mod:`agent.adapters.sim2bot_commands` maps messages onto
agent.model commands submitted as source ``sim2bot``;
:mod:`agent.adapters.sim2bot_telemetry` maps snapshots onto packets.

Source: Sim2Bot bridge protocol v1 (``protocol.md``, sim2bot-python, sim2bot 0.1.0; docs/sim2bot.md); peers ``sim2bot.bridge_server``
(the relay) and ``sim2bot.Robot`` (the controller client). See docs/sim2bot.md.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlparse

from agent.adapters.sim2bot_commands import (
    COMMAND_TYPES,
    CameraRequest,
    ParseContext,
    Submit,
    decode,
    parse,
)
from agent.adapters.sim2bot_room import SOURCE, Outcome, RoomLink
from agent.adapters.sim2bot_telemetry import camera_ids, hello_message
from agent.control.stoplatch import SenderLatch
from agent.config import AgentConfig
from agent.config.robotmsg import is_local_address
from agent.errors import CommandDeclined, CommandError
from agent.commands import BaseVelocity, JointVelocity, Reset, Stop
from agent.ports import LinkState, LinkStatus, RobotPort, VideoPort
from agent.support.ratelimit import RateLimitedLog, safe

log = logging.getLogger(__name__)

#: Identical warnings are repeated at most this often, s.
WARN_REPEAT_S = 10.0


def merged_state(parts: list[LinkStatus]) -> tuple[LinkState, bool, float, str]:
    """The adapter's (state, connected, since, last_error) from its rooms' link states: up when
    every room is up, down when one is down, else connecting; ``since`` when that state began (as
    far as the rooms tell); ``last_error`` of a room not up first, prefixed with the room when
    there are several."""
    connected = all(p.connected for p in parts)
    states = {p.state for p in parts}
    state = LinkState.UP if connected else LinkState.DOWN if LinkState.DOWN in states else LinkState.CONNECTING
    same = [p.since for p in parts if p.state is state] or [p.since for p in parts]
    since = max(same) if state is LinkState.UP else min(same)
    errors = sorted((p.connected, p.detail.get("room", ""), p.last_error) for p in parts if p.last_error)
    if not errors:
        return state, connected, since, ""
    _, room, error = errors[0]
    return state, connected, since, error if len(parts) == 1 else f"room {room}: {error}"


def merged_video(rooms: list[RoomLink]) -> dict[str, object]:
    """The rooms' VideoStreams.stats: per stream (prefixed with the room when there are several),
    numbers summed."""
    out: dict[str, Any] = {}
    for link in rooms:
        stats = link.streams.stats() if link.streams is not None else {}
        for key, value in stats.items():
            if isinstance(value, dict):
                out[key if len(rooms) == 1 else f"{link.room} {key}"] = value
            elif isinstance(value, (int, float)):
                out[key] = out.get(key, 0) + value
    return out


class Sim2botAdapter:
    """The agent on a Sim2Bot bridge, in the simulator role, in every configured room.

    Args:
        cfg: the agent config; ``cfg.sim2bot`` is this adapter's section.
        robot: the RobotPort (``agent.control.ControlLoop``).
        video: the VideoHub, or None when no camera is configured.
        config_path: unused (the interface shared by every adapter).
        clock, sleep: monotonic clock (s) and pause coroutine of the telemetry loop and the
            reconnect pauses (injected in tests; None: agent/adapters/sim2bot_room.py's defaults).

    Attributes:
        rooms: one :class:`RoomLink` per served room, in config order.
    """

    def __init__(self, cfg: AgentConfig, robot: RobotPort, video: VideoPort | None, *,
                 config_path: str | None = None, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[object]] | None = None) -> None:
        self._cfg = cfg
        self._s = cfg.sim2bot
        self._robot = robot
        desc = robot.description
        global_ids = camera_ids(desc)
        cameras = global_ids if video is not None else ()
        by_id = {c.id: c for c in cfg.drivers.cameras}
        streamable = {g: (cid, by_id[cid]) for g, cid in zip(global_ids, desc.cameras) if cid in by_id}
        self.rooms: list[RoomLink] = []
        for name in self._s.served_rooms:
            streams = None
            if video is not None and global_ids:
                from agent.adapters.sim2bot_video import SendBudget, VideoStreams
                streams = VideoStreams(video, streamable, self._s.subscription_ttl_s,
                                       max_age_s=cfg.video.max_frame_age_s, budget=SendBudget.from_config(cfg.video))
            self.rooms.append(RoomLink(name, self._s, desc, hello_message(desc, cfg, name), robot, self,
                                       streams, cameras, clock=clock, sleep=sleep))
        self._warn = RateLimitedLog(log, WARN_REPEAT_S)
        self._noted: set[str] = set()
        self._commander: str | None = None   # the room whose command was accepted last
        self._clock = clock
        # the stop latch between rooms: the control loop sees one source (docs/safety.md)
        self._rooms_latch = SenderLatch(cfg.source_timeout_s(SOURCE))
        self._counters = {"received": 0, "executed": 0, "rejected": 0, "declined": 0, "camera": 0, "status": 0}

    # ------------------------------------------------------------------ health
    def status(self) -> LinkStatus:
        """Connection state and counters, for health reports.

        Counters: ``received``, ``executed``, ``rejected``, ``declined``, ``camera``, ``status``,
        ``sent`` (telemetry packets), ``connects``, ``frames_sent``, ``streams`` (active now), all
        summed over rooms. State: ``up`` when every room's control socket is up.
        Detail: ``video_connected`` (every room's), ``url`` (without token), ``room`` (the first
        room), ``rooms`` (per room: state, ``connected``, ``video_connected``, ``controllers``,
        ``connects``, ``sent``, ``last_error``, ``simulators``, ``warning``), ``controllers`` (summed last
        ``bridge_status`` counts), ``warnings`` (:meth:`warnings`), ``video`` (frame ages per stream, VideoStreams.stats; with several rooms each
        stream is prefixed with its room). ``last_error``: the newest control-socket failure.
        """
        parts = [link.status() for link in self.rooms]
        streams = [link.streams for link in self.rooms if link.streams is not None]
        counters = {**self._counters, "sent": sum(link.sent for link in self.rooms),
                    "connects": sum(link.connects for link in self.rooms),
                    "frames_sent": sum(s.frames_sent for s in streams),
                    "streams": sum(len(s.active) for s in streams)}
        known = [link.controllers for link in self.rooms if link.controllers is not None]
        detail = {"video_connected": bool(streams) and all(link.video_connected for link in self.rooms),
                  "url": self._s.url, "room": self.rooms[0].room, "controllers": sum(known) if known else None,
                  "warnings": self.warnings(),
                  "rooms": {p.detail["room"]: {"state": p.state.value, "last_error": p.last_error, **p.detail}
                            for p in parts},
                  "video": merged_video(self.rooms)}
        state, connected, since, last_error = merged_state(parts)
        return LinkStatus(name=SOURCE, state=state, connected=connected, since=since, last_error=last_error,
                          counters=counters, detail=detail)

    def warnings(self) -> list[str]:
        """Each room's trouble in one sentence (another simulator takes the commands); [] when none."""
        return [f"sim2bot: {link.warning}" for link in self.rooms if link.warning]

    # ------------------------------------------------------------------ run
    async def run(self) -> None:
        """Serve every room: connect, announce, serve; each room reconnects forever with jittered
        capped backoff, on its own. Never raises on peer or network errors; returns only by
        cancellation."""
        if not is_local_address(self._s.url):
            if not self._s.token:
                log.warning("sim2bot: %s is not loopback and no token is configured; the bridge "
                            "will refuse the connection", self._s.url)
            elif urlparse(self._s.url).scheme == "ws":
                log.warning("sim2bot: the bridge token travels unencrypted over ws:// to %s", self._s.url)
        async with asyncio.TaskGroup() as group:
            for link in self.rooms:
                group.create_task(link.run(), name=f"sim2bot-room-{link.room}")

    def release(self, link: RoomLink, reason: str) -> bool:
        """``link``'s room lost its bridge link or its last controller: release the source (whatever
        sim2bot drives stops at once) unless another room gave the last accepted command (that
        room's controller owns the targets now). Returns whether it was released."""
        if self._commander not in (None, link.room):
            log.info("sim2bot: room %s: %s; source kept (room %s gave the last command)",
                     link.room, reason, self._commander)
            return False
        self._commander = None
        self._robot.release(SOURCE, reason)
        return True

    # ------------------------------------------------------------------ commands
    def handle_message(self, raw: str | bytes, room: str | None = None) -> str:
        """Handle one control-socket message of ``room`` (default: the first served room)
        synchronously, on the event loop thread.

        Returns:
            ``executed``, ``camera``, ``declined``, ``rejected`` or ``status``.

        Raises:
            KeyError: ``room`` is not served.
        """
        link = self.rooms[0] if room is None else next((r for r in self.rooms if r.room == room), None)
        if link is None:
            raise KeyError(f"room {room!r} is not served; served: {', '.join(r.room for r in self.rooms)}")
        return self.apply(link, *self.interpret(raw, link.ctx))

    def interpret(self, raw: str | bytes, ctx: ParseContext) -> tuple[str, Outcome]:
        """Decode and parse one message of the room ``ctx`` belongs to; thread-safe (reads only
        immutable state). Returns its type (escaped) and the outcome."""
        kind = "message"
        try:
            message = decode(raw, self._s.max_message_bytes)
            kind = safe(message.get("type"), 64)  # untrusted: escaped before it reaches a log line
            if kind in ("bridge_status", "scene"):
                return kind, message
            return kind, parse(message, ctx)
        except CommandError as err:
            return kind, err

    def apply(self, link: RoomLink, kind: str, outcome: Outcome) -> str:
        """Act on one parsed message from ``link``'s room (event loop thread); see handle_message."""
        self._counters["received"] += 1
        if isinstance(outcome, dict):
            self._counters["status"] += 1
            if kind == "bridge_status":
                link.bridge_status(outcome)
            return "status"
        if isinstance(outcome, CommandDeclined):  # valid, does nothing on a tank
            self._counters["declined"] += 1
            self._warn.log(logging.INFO, self._key(kind, outcome), "sim2bot: %s accepted but ignored: %s", kind, outcome)
            return "declined"
        try:
            if isinstance(outcome, CommandError):
                raise outcome
            if isinstance(outcome, Submit):
                return self._submit(link, kind, outcome)
            if link.streams is not None:  # else ctx.cameras is empty and parse rejected it
                if isinstance(outcome, CameraRequest):
                    link.streams.subscribe(outcome, self._formats_elsewhere(link, outcome.camera))
                else:  # CameraRelease: this room's streams of the camera only
                    link.streams.unsubscribe(outcome.camera)
            self._counters["camera"] += 1
            return "camera"
        except CommandError as err:  # bad input, or a subscription the streams refuse
            self._counters["rejected"] += 1
            self._warn.log(logging.WARNING, self._key(kind, err), "sim2bot: rejected %s: %s", kind, err,
                           detail=err.detail)
            return "rejected"

    def _formats_elsewhere(self, link: RoomLink, camera: str) -> set:
        """Formats of ``camera`` the other rooms stream: the per-camera limit spans rooms (each
        distinct format costs an encode per frame, whichever room asked)."""
        return set().union(*(r.streams.formats(camera) for r in self.rooms
                             if r is not link and r.streams is not None))

    @staticmethod
    def _key(kind: str, err: CommandError) -> tuple[str, str, str]:
        """Rate-limit key of a rejection: source, reason and the message type when it is a known one
        (a bounded set), so junk with ever-new types or texts still costs one line per reason."""
        return SOURCE, err.reason, kind if kind in COMMAND_TYPES else "?"

    def _submit(self, link: RoomLink, kind: str, outcome: Submit) -> str:
        command, sender = outcome.command, f"room {link.room}"
        if isinstance(command, (BaseVelocity, JointVelocity)):
            refusal = self._rooms_latch.velocity(sender, command, self._clock())
            if refusal is not None:
                self._counters["rejected"] += 1
                self._warn.log(logging.WARNING, (SOURCE, "latched", link.room), "sim2bot: %s refused: %s",
                               kind, refusal)
                return "rejected"
        try:
            self._robot.submit(SOURCE, command)
        except CommandError as err:  # the control loop logs its own rejections
            self._counters["rejected"] += 1
            log.debug("sim2bot: %s refused by the robot: %s", kind, err)
            return "rejected"
        if isinstance(command, Stop):
            latched = self._rooms_latch.stop(sender, self._clock())
            if latched:
                log.info("sim2bot: stop from %s: %s latched out until they re-engage", sender, ", ".join(latched))
        elif isinstance(command, Reset):
            self._rooms_latch.reset(sender)
        self._commander = link.room
        for name in outcome.ignored:
            self._note(f"ignored:{name}", logging.WARNING,
                       f"sim2bot: base_velocity {name} ignored: a tracked base moves only along x and yaw")
        self._counters["executed"] += 1
        return "executed"

    def _note(self, key: str, level: int, text: str) -> None:
        if key not in self._noted:
            self._noted.add(key)
            log.log(level, "%s", text)
