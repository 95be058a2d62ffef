"""robot_msg: one configured socket (:class:`Channel`) and its peers, from the socket's monitor
events (:class:`PeerEvents`): who is connected, disconnects, failed CURVE handshakes. A command
socket's last word is its peer leaving: that releases the ``robot_msg`` source at once.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from agent.adapters.robotmsg_sockets import CLOSED, HANDSHAKE_FAILED, OPENED
from agent.config.robotmsg import SocketConfig
from agent.support.ratelimit import RateLimitedLog

log = logging.getLogger("agent.adapters.robotmsg")


@dataclass(eq=False)
class Channel:
    """Runtime of one configured socket."""

    name: str
    cfg: SocketConfig
    kind: int
    accepts: type | None
    sock: zmq.asyncio.Socket | None = None
    endpoint: str = ""
    #: the endpoint a bind resolved last (kept across reopens: a wildcard port is bound again)
    bound: str = ""
    peers: set[int] = field(default_factory=set)

    @property
    def topic(self) -> bytes | None:
        return self.cfg.topic.encode() if self.cfg.topic else None

    @property
    def where(self) -> str:
        return f"{self.name} ({self.cfg.mode} {self.endpoint or self.cfg.address})"


class PeerEvents:
    """Follows each socket's monitor events.

    Args:
        drop_bytes: the frame size that also ends a connection (twice ``max_frame_bytes``), bytes:
            named in the disconnect log line.
        release: called with a reason when a command socket's peer disconnects.
        warn: the adapter's rate-limited warning log.

    Attributes:
        disconnects: peer disconnects per socket name. handshake_failures: failed handshakes, all sockets.
    """

    def __init__(self, drop_bytes: int, release: Callable[[str], None], warn: RateLimitedLog) -> None:
        self._drop_bytes = drop_bytes
        self._release = release
        self._warn = warn
        self.disconnects: collections.Counter[str] = collections.Counter()
        self.handshake_failures = 0

    async def watch(self, ch: Channel) -> None:
        """Read ``ch``'s monitor socket until cancelled."""
        assert ch.sock is not None
        monitor = ch.sock.get_monitor_socket()
        try:
            while True:
                self.on_event(ch, parse_monitor_message(await monitor.recv_multipart()))
        finally:
            monitor.close(linger=0)

    def on_event(self, ch: Channel, event: Mapping[str, Any]) -> None:
        """One monitor event of ``ch`` (``zmq.utils.monitor.parse_monitor_message``'s dict)."""
        kind, value = event["event"], event["value"]
        endpoint = event.get("endpoint", b"").decode(errors="replace")
        if kind in OPENED:
            ch.peers.add(value)
            log.info("robot_msg %s: peer connected on %s (%d peer(s))", ch.where, endpoint, len(ch.peers))
        elif kind in CLOSED:
            ch.peers.discard(value)
            self.disconnects[ch.name] += 1
            log.info("robot_msg %s: peer disconnected from %s (%d left; a frame over %d bytes also ends "
                     "a connection)", ch.where, endpoint, len(ch.peers), self._drop_bytes)
            if ch.kind == zmq.SUB:
                self._release(f"robot_msg {ch.name} peer disconnected")
        elif kind in HANDSHAKE_FAILED:
            self.handshake_failures += 1
            self._warn.log(logging.WARNING, (ch.name, "handshake"),
                           "robot_msg %s: handshake with a peer failed (%s, %s)",
                           ch.where, zmq.Event(kind).name, value)
        else:
            log.debug("robot_msg %s: socket event %s %s", ch.where, kind, value)
