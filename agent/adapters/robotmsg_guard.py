"""robot_msg against floods: bounded reading of one message, dropping a socket's peers, heap trim.

libzmq hands a multipart message to the application only once its last part has arrived: it
holds the whole message until then, and no socket option bounds a message's part count or total
(ZMQ_MAXMSGSIZE bounds each frame). So the agent bounds what it can (docs/robot_msg.md,
"Receiving: limits, latest-wins, rejections"):

- :func:`read_message_now` (on a receiving thread) reads a message part by part without copies and keeps it only within :data:`MAX_PARTS` parts and
  ``max_frame_bytes``; beyond that every part is freed as it is read.
- :class:`DropPolicy` counts each dropped message with its reason (``oversize``, ``framing``),
  decides when a socket's peers are dropped (a message of more than twice ``max_frame_bytes``,
  as libzmq drops the peer of a single frame that large, or of so many parts that their message
  structures, :data:`PART_COST_BYTES` each, take more than that; at most once per
  :data:`EVICT_INTERVAL_S`), and gives the freed heap back to the OS after drops
  (:func:`agent.support.heap.release_memory`).
- :func:`rebind_now` drops a socket's peers (unbind and bind again, or disconnect and connect again);
  ZeroMQ does not say which peer sent a SUB message, so the sender cannot be singled out.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import TypeVar

import zmq

from agent.adapters.robotmsg_inbound import Rejected
from agent.support.heap import release_memory

#: Parts a robot_msg message may have: ``[envelope]`` or ``[topic, envelope]``.
MAX_PARTS = 2
#: A socket's peers are dropped for an oversized message at most once per this many seconds.
EVICT_INTERVAL_S = 1.0
#: What one part costs libzmq besides its bytes (its ``zmq_msg_t``), bytes.
PART_COST_BYTES = 64
#: Dropped messages that cost at least this much in all (:meth:`Dropped.cost`) give the freed heap
#: back to the OS, TRIM_DELAY_S after the drop that reached it (drops meanwhile share that trim).
TRIM_AFTER_BYTES = 1 << 20
TRIM_DELAY_S = 0.2
#: read_message_now checks its ``stop`` event after every this many parts (a message of a
#: million 1-byte parts takes about 0.7 s to read on a 2-core x86 box, longer on a Pi).
YIELD_EVERY_PARTS = 4096
#: How long :func:`rebind_now` retries binding the address it just unbound (libzmq closes the
#: listener on its I/O thread, after unbind returns), s.
REBIND_TIMEOUT_S = 1.0


@dataclass(frozen=True, slots=True)
class Dropped:
    """A received message that broke a limit and was dropped as it was read.

    Attributes:
        parts: how many parts it had.
        size: all its parts together, bytes.
    """

    parts: int
    size: int

    @property
    def cost(self) -> int:
        """What libzmq held for it, bytes: its bytes plus :data:`PART_COST_BYTES` a part."""
        return self.size + PART_COST_BYTES * self.parts


def _read_parts(sock: zmq.Socket, first: zmq.Frame, max_parts: int,
                max_bytes: int) -> Generator[float, None, list[bytes] | Dropped]:
    """The reading of :func:`read_message_now`; yields a pause (0 s) every :data:`YIELD_EVERY_PARTS` parts."""
    kept: list[zmq.Frame] | None = [first] if len(first) <= max_bytes else None
    parts, size, more = 1, len(first), first.more
    while more:
        frame = sock.recv(zmq.NOBLOCK, copy=False)  # never Again: libzmq delivers a message whole
        parts += 1
        size += len(frame)
        more = frame.more
        if parts % YIELD_EVERY_PARTS == 0:
            yield 0.0
        if kept is not None:
            if parts > max_parts or size > max_bytes:
                kept = None
            else:
                kept.append(frame)
        del frame
    if kept is None:
        return Dropped(parts, size)
    return [f.bytes for f in kept]


def _rebinding(sock: zmq.Socket, mode: str, address: str) -> Generator[float, None, None]:
    """The steps of :func:`rebind_now`; yields the pause before each retry of the bind, s."""
    if mode != "bind":
        sock.disconnect(address)
        sock.connect(address)
        return
    sock.unbind(address)
    deadline = time.monotonic() + REBIND_TIMEOUT_S
    while True:
        try:
            sock.bind(address)  # each call also lets the socket take in the listener's end
            return
        except zmq.ZMQError as err:
            if err.errno != zmq.EADDRINUSE or time.monotonic() >= deadline:
                raise
        yield 0.01


T = TypeVar("T")


class Interrupted(Exception):
    """:func:`read_message_now` / :func:`rebind_now` ended early: their ``stop`` was set (the socket
    is about to close; the message's remaining parts or the bind are left undone)."""


def _now(steps: Generator[float, None, T], stop: threading.Event | None = None) -> T:
    """Run ``steps`` on this thread, sleeping its pauses; raises :class:`Interrupted` at a pause once
    ``stop`` is set."""
    try:
        while True:
            pause = next(steps)
            if stop is not None and stop.is_set():
                steps.close()
                raise Interrupted
            if pause > 0:
                time.sleep(pause)
    except StopIteration as done:
        return done.value


def read_message_now(sock: zmq.Socket, first: zmq.Frame, max_parts: int, max_bytes: int,
                     stop: threading.Event | None = None) -> list[bytes] | Dropped:
    """The message whose first part is ``first``, read part by part on the calling thread (the
    adapter's receiving threads: agent/adapters/robotmsg_receive.py), kept only within the limits.

    Parts are received without a copy (``zmq.Frame``); once the message has more than
    ``max_parts`` parts or more than ``max_bytes`` bytes, the parts kept so far are let go and
    every later part is received and freed at once, so dropping a message of 150 parts of 1 MiB
    holds one part at a time, never a copy of the message. It never pauses: the GIL's switch
    interval lets the other threads run.

    Args:
        sock: the socket, synchronous (the rest of a message is queued once its first part is).
        first: the message's first part, received with ``copy=False``.
        max_parts: most parts kept.
        max_bytes: most bytes of all parts together.
        stop: checked every :data:`YIELD_EVERY_PARTS` parts (a message of a million parts is left
            within milliseconds).

    Returns:
        The parts as bytes, or :class:`Dropped` (part count and total size).

    Raises:
        Interrupted: ``stop`` was set.
    """
    return _now(_read_parts(sock, first, max_parts, max_bytes), stop)


def rebind_now(sock: zmq.Socket, mode: str, address: str, stop: threading.Event | None = None) -> None:
    """Drop every peer of ``sock`` on the calling thread (the thread that reads it): a bound socket is
    unbound from ``address`` (its resolved endpoint) and bound to it again, a connecting one
    disconnects and connects again. The peers' ZeroMQ reconnects by itself.

    Raises:
        zmq.ZMQError: the address could not be bound again within :data:`REBIND_TIMEOUT_S`.
        Interrupted: ``stop`` was set before a retry.
    """
    _now(_rebinding(sock, mode, address), stop)


class DropPolicy:
    """What happens after a message was dropped as it was read (thread-safe: the adapter's receiving
    threads judge, the event loop runs :meth:`trim_loop`).

    Args:
        max_bytes: ``robot_msg.max_frame_bytes``.

    Attributes:
        evictions: per socket name, how often its peers were dropped.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.evictions: collections.Counter[str] = collections.Counter()
        self._evicted_at: dict[str, float] = {}
        self._dropped_cost = 0
        self._trim = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None   # trim_loop's
        self._lock = threading.Lock()

    def judge(self, socket_name: str, dropped: Dropped, now: float) -> tuple[Rejected, bool]:
        """The rejection to count for ``dropped`` and whether to drop the socket's peers now
        (counted in :attr:`evictions` when so); ``now`` is the monotonic clock, s."""
        if dropped.size > self.max_bytes:
            rejected = Rejected("oversize", f"message of {dropped.parts} part(s), {dropped.size} bytes; the limit "
                                            f"is {self.max_bytes} bytes (dropped as it was read)")
        else:
            rejected = Rejected("framing", f"{dropped.parts} parts; at most {MAX_PARTS} ([topic, envelope]) "
                                           "(dropped as it was read)")
        with self._lock:
            self._dropped_cost += dropped.cost
            trim = self._dropped_cost >= TRIM_AFTER_BYTES
            if trim:
                self._dropped_cost = 0
            evict = (max(dropped.size, PART_COST_BYTES * dropped.parts) > 2 * self.max_bytes
                     and now - self._evicted_at.get(socket_name, float("-inf")) >= EVICT_INTERVAL_S)
            if evict:
                self._evicted_at[socket_name] = now
                self.evictions[socket_name] += 1
        if trim:
            self._wake_trim()
        return rejected, evict

    def _wake_trim(self) -> None:
        loop = self._loop
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if loop is None or loop is here:
            self._trim.set()
        else:                       # from a receiving thread: asyncio.Event is the loop's
            loop.call_soon_threadsafe(self._trim.set)

    async def trim_loop(self) -> None:
        """Run forever: give the heap freed by dropped messages back to the OS once a burst ends."""
        self._loop = asyncio.get_running_loop()
        while True:
            await self._trim.wait()
            await asyncio.sleep(TRIM_DELAY_S)  # coalesce a burst: drops meanwhile set the event again
            self._trim.clear()
            await asyncio.to_thread(release_memory)
