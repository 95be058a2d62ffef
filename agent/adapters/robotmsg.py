"""robot_msg over ZeroMQ: RobotState out, RobotAction and ControllerCommand in (issue 5).

Three sockets (docs/robot_msg.md): a PUB publishing ``RobotState`` at
``state_hz``, a SUB for ``ControllerCommand`` and a SUB for ``RobotAction``,
by default bound on loopback at the ``robot_msg.ports`` numbers. The
translation is in robotmsg_inbound.py / robotmsg_state.py, what applies in which order in
robotmsg_order.py, the ZeroMQ plumbing in robotmsg_sockets.py, the sockets' peers in
robotmsg_peers.py; this module runs them on the event loop.

Receiving runs on a thread per SUB socket (robotmsg_receive.ChannelReader), which submits to
the control loop itself: a command never waits for the event loop. It is latest-wins: each
wake-up drains what the socket holds (at most ``MAX_DRAIN`` messages), rejects what is
malformed, keeps the newest message of each kind (type and fields present, plus any stop) and
applies only those. The action socket decodes newest first and at most ``DECODE_BUDGET`` per
wake-up, so a flood never outruns the reader; a 1 MiB trajectory is decoded on that thread,
never on the event loop. :meth:`RobotMsgAdapter._apply` runs on the receiving threads under one
lock. A peer disconnecting from a command socket releases the ``robot_msg`` source at once.

Messages are read part by part (robotmsg_guard.read_message_now, on each socket's receiving thread): one with more
parts than ``[topic, envelope]`` or more bytes than ``max_frame_bytes`` is dropped
as it is read, never copied whole; one over twice ``max_frame_bytes`` in bytes or in
parts' overhead (what ZMQ_MAXMSGSIZE does to a single frame) also drops the socket's peers, and the freed
heap is given back to the OS after a burst of drops (robotmsg_guard.DropPolicy).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from pathlib import Path
from typing import cast

import robot_msg as rm
import zmq
import zmq.asyncio

from agent.adapters.robotmsg_inbound import Rejected, Translation, action_commands, controller_commands
from agent.adapters.robotmsg_order import StopOrder
from agent.adapters.robotmsg_guard import DropPolicy
from agent.adapters.robotmsg_peers import Channel, PeerEvents
from agent.adapters.robotmsg_publish import SlotPublisher
from agent.adapters.robotmsg_receive import ChannelReader
from agent.adapters.robotmsg_sockets import CurveKeys, load_curve, open_socket, start_authenticator
from agent.adapters.robotmsg_encode import StateEncoder
from agent.adapters.robotmsg_state import StateFrames, monotonic_clock_id
from agent.config import AgentConfig
from agent.errors import CommandError
from agent.commands import CalibrateImu, Stop
from agent.ports import LinkStatus, RobotPort, VideoPort
from agent.support.ratelimit import RateLimitedLog, safe
from agent.support.reconnect import Reconnector

log = logging.getLogger(__name__)

SOURCE = "robot_msg"
#: Identical warnings are logged at most once per this many seconds.
WARN_INTERVAL_S = 5.0


class RobotMsgAdapter:
    """The robot_msg adapter. Construct once; ``await run()`` until cancelled.

    Args:
        cfg: the agent config (``cfg.robot_msg`` is used).
        robot: the RobotPort (``agent.control.ControlLoop``).
        video: unused (robot_msg carries no images); accepted for the common adapter signature.
        config_path: params.json path; relative CURVE key paths resolve against its directory.

    Raises:
        ConfigError: CURVE key files missing or invalid.
    """

    def __init__(self, cfg: AgentConfig, robot: RobotPort, video: VideoPort | None = None, *,
                 config_path: str | None = None) -> None:
        self._cfg = cfg.robot_msg
        self._robot = robot
        base_dir = Path(config_path).resolve().parent if config_path else Path.cwd()
        self._keys: CurveKeys | None = load_curve(self._cfg.curve, base_dir) if self._cfg.curve else None
        self._frames = StateFrames(self._cfg.frame_id, self._cfg.odom_frame_id, self._cfg.imu_world_frame_id)
        self._clock_id = monotonic_clock_id()
        self._encoder = StateEncoder(robot.description, self._clock_id, self._frames)
        self._channels = {
            "state": Channel("state", self._cfg.state, zmq.PUB, None),
            "command": Channel("command", self._cfg.command, zmq.SUB, rm.ControllerCommand),
            "action": Channel("action", self._cfg.action, zmq.SUB, rm.RobotAction),
        }
        self._warn = RateLimitedLog(log, WARN_INTERVAL_S)
        self._publisher: SlotPublisher | None = None
        self._stop_order = StopOrder()
        self._connected = False
        self._driving = False
        self._link = Reconnector("robot_msg: sockets", log, first_s=self._cfg.reconnect_delay_s,
                                 max_s=self._cfg.reconnect_delay_max_s, level=logging.WARNING)
        self._sequence = 0
        self._apply_lock = threading.RLock()    # _apply, _reject, _release: the receiving threads and the loop
        self._applied = 0
        self._sent = 0
        self._state_errors = 0
        self._rejected: collections.Counter[str] = collections.Counter()
        self._declined: collections.Counter[str] = collections.Counter()
        self._events: collections.Counter[str] = collections.Counter()
        self._peers = PeerEvents(2 * self._cfg.max_frame_bytes, self._release, self._warn)
        self._drops = DropPolicy(self._cfg.max_frame_bytes)
        self._readers = {ch.name: self._reader(ch) for ch in self._channels.values() if ch.kind == zmq.SUB}

    # ------------------------------------------------------------------ lifecycle

    async def run(self) -> None:
        """Open the sockets and serve until cancelled; on any failure release the source and retry with
        jittered, capped backoff (agent.support.reconnect). Never raises but CancelledError."""
        try:
            await self._link.run(self._session, errors=(zmq.ZMQError, OSError))
        finally:
            self._release("robot_msg adapter stopped")

    async def _session(self) -> None:
        try:
            await self._serve()
        finally:
            task = asyncio.current_task()
            if task is None or not task.cancelling():
                # the sockets are closed: peers are gone, so whatever robot_msg drove stops now
                self._release("robot_msg sockets closed")

    async def _serve(self) -> None:
        ctx = zmq.asyncio.Context()
        auth = None
        tasks: list[asyncio.Task] = []
        try:
            if self._keys is not None:
                auth = start_authenticator(ctx, self._keys)
            for ch in self._channels.values():
                ch.sock = self._open(ctx, ch)
                ch.endpoint = (cast(bytes, ch.sock.getsockopt(zmq.LAST_ENDPOINT)).decode() if ch.cfg.mode == "bind"
                               else ch.cfg.address)
                ch.bound = ch.endpoint if ch.cfg.mode == "bind" else ""
            self._connected = True
            self._link.up()
            s, c, a = (self._channels[n] for n in ("state", "command", "action"))
            log.info("robot_msg: state PUB %s %s, command SUB %s %s, action SUB %s %s (%s envelopes, CURVE %s)",
                     s.cfg.mode, s.endpoint, c.cfg.mode, c.endpoint, a.cfg.mode, a.endpoint,
                     self._cfg.encoding, "on" if self._keys else "off")
            state = self._channels["state"]
            tasks.append(asyncio.create_task(self._publish_loop(state), name="robotmsg-state"))
            tasks.append(asyncio.create_task(self._drops.trim_loop(), name="robotmsg-trim"))
            for ch in self._channels.values():
                tasks.append(asyncio.create_task(self._peers.watch(ch), name=f"robotmsg-monitor-{ch.name}"))
            await asyncio.sleep(0)      # the monitors are attached before a receiving thread owns its socket
            for ch in self._channels.values():
                if ch.kind == zmq.SUB:
                    tasks.append(asyncio.create_task(self._readers[ch.name].run(), name=f"robotmsg-{ch.name}"))
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.result()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._connected = False
            for ch in self._channels.values():
                ch.sock = None
                ch.endpoint = ""
                ch.peers.clear()
            if auth is not None:
                auth.stop()
            ctx.destroy(linger=0)

    def _open(self, ctx: zmq.asyncio.Context, ch: Channel) -> zmq.asyncio.Socket:
        """Open ``ch``'s socket. A bind to a wildcard port (``tcp://127.0.0.1:*``) reopened after a
        failure takes the port it had, so the peers that found it reconnect by themselves; another
        one only when that port is taken. Raises zmq.ZMQError."""
        if ch.bound and ch.cfg.address.endswith(":*"):   # bound: set in bind mode only
            try:
                return open_socket(ctx, ch.kind, ch.cfg, self._cfg, self._keys, address=ch.bound)
            except zmq.ZMQError as err:
                log.warning("robot_msg %s: cannot bind %s again (%s); binding %s", ch.name, ch.bound, err,
                            ch.cfg.address)
        return open_socket(ctx, ch.kind, ch.cfg, self._cfg, self._keys)

    def _release(self, reason: str) -> None:
        with self._apply_lock:
            if self._driving:
                self._driving = False
                log.info("robot_msg: releasing the robot: %s", reason)
                self._robot.release(SOURCE, reason)

    def _reader(self, ch: Channel) -> ChannelReader:
        return ChannelReader(ch, max_bytes=self._cfg.max_frame_bytes, modes=self._cfg.ctrl_modes, drops=self._drops,
                             reject=self._reject, apply=self._apply, evicted=self._evicted)

    # ------------------------------------------------------------------ receiving

    def _evicted(self, ch: Channel) -> None:
        """Before the peers of ``ch`` are dropped after a message over twice ``max_frame_bytes`` (libzmq
        does the same to a single frame that large; ch's receiving thread rebinds): warn, release."""
        self._warn.log(logging.WARNING, (ch.name, "evict"),
                       "robot_msg %s: a message over %d bytes or parts' overhead: dropping this socket's peers (they reconnect "
                       "by themselves)", ch.where, 2 * self._cfg.max_frame_bytes)
        if ch.kind == zmq.SUB:
            self._release(f"robot_msg {ch.name}: peers dropped after an oversized message")

    def _reject(self, ch: Channel, rejected: Rejected, *, logged: bool = False) -> None:
        with self._apply_lock:
            self._rejected[rejected.reason] += 1
        if logged:
            log.debug("robot_msg %s: rejected (%s): %s", ch.where, rejected.reason, safe(rejected.detail, 200))
            return
        self._warn.log(logging.WARNING, (ch.name, rejected.reason), "robot_msg %s: rejected (%s): %s",
                       ch.where, rejected.reason, safe(rejected.detail, 200))

    def _translate(self, message: object) -> Translation:
        dof = self._robot.description.dof
        if isinstance(message, rm.RobotAction):
            return action_commands(message, dof)
        return controller_commands(cast(rm.ControllerCommand, message), dof, self._cfg.ctrl_modes)

    def _apply(self, ch: Channel, message: object) -> None:
        """Translate ``message`` and submit its commands (on ``ch``'s receiving thread)."""
        with self._apply_lock:
            self._apply_locked(ch, message)

    def _apply_locked(self, ch: Channel, message: object) -> None:
        try:
            translation = self._translate(message)
            self._stop_order.check(message, translation, time.monotonic())
        except Rejected as rejected:
            self._reject(ch, rejected)
            return
        for declined in translation.declined:
            self._declined[declined.field] += 1
            self._warn.log(logging.WARNING, (ch.name, "declined", declined.field),
                           "robot_msg %s: %s declined: %s", ch.where, declined.field, declined.why)
        for command, where in zip(translation.commands, translation.fields, strict=True):
            try:
                self._robot.submit(SOURCE, command)
            except CommandError as err:
                # the control loop has logged why (rate-limited); count it here
                self._reject(ch, Rejected("refused", f"{where}: the robot refused {type(command).__name__}: {err}"),
                             logged=True)
                return
            self._driving = True
            if isinstance(command, Stop):
                self._stop_order.stopped(message, time.monotonic())
            if isinstance(command, CalibrateImu):
                self._events["calibrate_sensor"] += 1
        if translation.publish_state:
            self._events["ctrl_update"] += 1
            publisher = self._publisher
            # at once, but at most one ctrl_update's state per slot: the others ride on the next slot's
            if publisher is not None and not publisher.now():
                self._events["ctrl_update_merged"] += 1
        if translation.commands:
            self._applied += 1

    # ------------------------------------------------------------------ publishing

    async def _publish_loop(self, ch: Channel) -> None:
        assert ch.sock is not None
        pub: zmq.Socket[bytes] = zmq.Socket.shadow(ch.sock.underlying)
        # the first state at once, then on the slots k * period of the loop's clock, each sent from its
        # timer's callback (agent.adapters.robotmsg_publish); a ctrl_update adds one at once
        self._publisher = SlotPublisher(1.0 / self._cfg.state_hz, lambda: self._publish_state(pub, ch.topic))
        await self._publisher.run()

    def _publish_state(self, pub: zmq.Socket, topic: bytes | None) -> None:
        try:
            data = self._encoder.envelope(self._robot.snapshot(), self._cfg.encoding, sequence=self._sequence,
                                          send_unix_s=time.time())
        except rm.RobotMsgError as err:
            self._state_errors += 1
            self._warn.log(logging.WARNING, "state-encode",
                           "robot_msg: RobotState not sent, it fails validation: %s", err)
            return
        if topic:       # send_multipart's own calls, without its per-part type checks (both are bytes)
            pub.send(topic, zmq.SNDMORE | zmq.NOBLOCK)
        pub.send(data, zmq.NOBLOCK)
        self._sequence += 1
        self._sent += 1

    # ------------------------------------------------------------------ health

    def warnings(self) -> list[str]:
        """Trouble an operator should read, one sentence each (the console shows them); [] when none."""
        return []

    def status(self) -> LinkStatus:
        """Health and counters (thread-safe reads of plain values).

        Returns:
            connected: sockets open. Counters: ``received`` (ZeroMQ messages), ``applied`` (messages
            that reached the robot), ``superseded`` (dropped by latest-wins), ``rejected`` (total),
            ``sent`` (RobotState published), ``state_errors``, ``handshake_failures``. Detail:
            ``rejected_reasons``, ``declined`` (per field), ``events`` (ctrl_update,
            calibrate_sensor, and ``ctrl_update_merged``: ctrl_updates whose state was the next slot's,
            one at once having gone out in their slot), ``peers``, ``disconnects`` and ``evictions``
            (peers dropped after an oversized message) per socket, ``endpoints`` (the address
            each socket is bound or connecting to, "" while closed), ``encoding``, ``curve``.
        """
        rejected = dict(self._rejected)
        received = sum(r.received for r in self._readers.values())
        superseded = sum(r.superseded for r in self._readers.values())
        counters = {"received": received, "applied": self._applied, "superseded": superseded,
                    "rejected": sum(rejected.values()), "sent": self._sent, "state_errors": self._state_errors,
                    "handshake_failures": self._peers.handshake_failures}
        detail = {
            "rejected_reasons": rejected,
            "declined": dict(self._declined),
            "events": dict(self._events),
            "peers": {name: len(ch.peers) for name, ch in self._channels.items()},
            "disconnects": dict(self._peers.disconnects),
            "evictions": dict(self._drops.evictions),
            "endpoints": {name: ch.endpoint for name, ch in self._channels.items()},
            "encoding": self._cfg.encoding,
            "curve": self._keys is not None,
        }
        return self._link.status(SOURCE, counters, detail, connected=self._connected)
