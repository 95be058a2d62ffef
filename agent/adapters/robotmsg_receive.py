"""robot_msg receiving: each SUB socket read on a thread of its own, its commands handed straight to the robot.

Each receiving socket (``command``, ``action``) has a thread, ``robotmsg-<name>``
(:class:`ChannelReader`), that sleeps in ``zmq_poll`` on the socket and on a stop pipe. On a
message it drains the socket, keeps the newest message of each kind (robotmsg_order.LatestWins)
and hands those to the adapter's ``apply``, which submits them to the control loop (thread-safe:
agent.control.front). A command's way from the wire to ``ControlLoop.submit`` therefore never
waits for the event loop to finish what it is doing (a telemetry or video send of another
adapter): the latency stages of scripts/bench_pi.py, robot_msg's ``loop`` stage.

The socket is the adapter's: opened, bound and monitored on the event loop, which never reads it
(it never awaits it, so zmq.asyncio never watches it). While the thread runs, it alone reads the
socket, through a synchronous shadow (ZeroMQ sockets are not thread-safe; a socket may move
between threads with a memory barrier, which the thread's start and end are). Blocking reads run
on this thread only, never on the event loop (docs/architecture.md, "Processes, threads, loops").

The thread's end is awaited by :meth:`ChannelReader.run`: an exception on the thread (a bug in
the translation, a rebind that failed) ends ``run`` with it, and the adapter's session reopens
its sockets (agent/adapters/robotmsg.py); cancelling ``run`` stops the thread and waits for it:
the thread stops between messages, and within a message of many parts or a rebind (a flooding
peer never holds the agent's shutdown past its bound, agent.app.ADAPTER_STOP_S).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import cast

import zmq

from agent.adapters.robotmsg_guard import (MAX_PARTS, DropPolicy, Dropped, Interrupted, read_message_now,
                                           rebind_now)
from agent.adapters.robotmsg_inbound import Rejected, decode_envelope, expect_type, unpack_frames
from agent.adapters.robotmsg_order import LatestWins
from agent.adapters.robotmsg_peers import Channel

log = logging.getLogger("agent.adapters.robotmsg")

#: Most messages taken from one socket per wake-up before they are processed.
MAX_DRAIN = 1024
#: Action socket: at most this many of a wake-up's messages are decoded, newest first; older
#: ones are superseded undecoded, so a flood costs one cheap read per message. The command
#: socket decodes every message: a stop is never dropped.
DECODE_BUDGET = 16
#: A wake-up stops draining once it has read this many parts (a flood of many-part messages is
#: read a few messages per wake-up: a stop read among them is applied at once, not after
#: MAX_DRAIN of them). Normal traffic, one or two parts a message, never reaches it.
MAX_DRAIN_PARTS = 4 * MAX_DRAIN
#: A wake-up stops draining once the messages it kept hold this many bytes (the rest waits in
#: libzmq for the next wake-up: nothing is lost, the copies in hand stay bounded).
DRAIN_MAX_BYTES = 4 << 20
#: The command socket's wake-up stops sooner: it decodes every message it kept before applying
#: any, so a stop read among large envelopes waits for at most about this many bytes of decoding
#: (a 1 MiB JSON envelope takes ~0.1 s to decode on the test machine).
COMMAND_DRAIN_MAX_BYTES = 256 << 10


class ChannelReader:
    """One SUB channel's receiving thread; see the module docstring.

    Args:
        ch: the channel, its socket open (read only by this reader's thread while it runs).
        max_bytes: ``robot_msg.max_frame_bytes``.
        modes: ``robot_msg.ctrl_modes`` (what latest-wins never drops: a stop).
        drops: the adapter's drop policy (counts dropped messages, decides evictions).
        reject: counts and logs a rejected message (called on the thread).
        apply: applies one decoded message (called on the thread, newest of each kind last).
        evicted: called on the thread before a socket's peers are dropped (warns, releases).

    Attributes:
        received: messages read (counted before their outcome). superseded: dropped by latest-wins.
    """

    def __init__(self, ch: Channel, *, max_bytes: int, modes: Mapping[int, str], drops: DropPolicy,
                 reject: Callable[[Channel, Rejected], None], apply: Callable[[Channel, object], None],
                 evicted: Callable[[Channel], None]) -> None:
        self.ch = ch
        self._max_bytes = max_bytes
        self._modes = modes
        self._drops = drops
        self._reject = reject
        self._apply = apply
        self._evicted = evicted
        self._budget = None if ch.name == "command" else DECODE_BUDGET
        self._max_held = COMMAND_DRAIN_MAX_BYTES if ch.name == "command" else DRAIN_MAX_BYTES
        self.received = 0
        self.superseded = 0
        self._stopping = threading.Event()    # set by run() on its way out: the drain ends between parts

    async def run(self) -> None:
        """Read the channel on the thread until cancelled (then the thread is stopped and awaited);
        raises what the thread raised."""
        assert self.ch.sock is not None
        sock: zmq.Socket[bytes] = zmq.Socket.shadow(self.ch.sock.underlying)   # synchronous: this session's socket
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[None] = loop.create_future()
        stop_r, stop_w = os.pipe()
        self._stopping.clear()

        def end(err: BaseException | None) -> None:    # on the loop
            if ended.done():
                return
            if err is not None:
                ended.set_exception(err)
            else:
                ended.set_result(None)

        def body() -> None:
            err: BaseException | None = None
            try:
                self._read(sock, stop_r)
            except Interrupted:
                pass                # stopped mid-message or mid-rebind: the socket closes next
            except BaseException as exc:  # noqa: BLE001 - handed to run(), which raises it
                err = exc
            finally:
                os.close(stop_r)
                with contextlib.suppress(RuntimeError):        # the loop is closed: nobody waits
                    loop.call_soon_threadsafe(end, err)

        thread = threading.Thread(target=body, name=f"robotmsg-{self.ch.name}", daemon=True)
        thread.start()
        try:
            await asyncio.shield(ended)
        finally:
            if not ended.done():
                self._stopping.set()
                os.write(stop_w, b"\0")
                with contextlib.suppress(Exception):
                    await ended                     # the thread has let go of the socket
            os.close(stop_w)

    # ------------------------------------------------------------------ the thread
    def _read(self, sock: zmq.Socket, stop_fd: int) -> None:
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(stop_fd, zmq.POLLIN)
        while True:
            ready = dict(poller.poll())
            if stop_fd in ready:
                return
            self._wake_up(sock)

    def _wake_up(self, sock: zmq.Socket) -> None:
        """Drain what the socket holds (bounded), reject what is malformed, apply the newest of each kind."""
        ch = self.ch
        batch: list[list[bytes]] = []
        read, parts, held, evict = 0, 0, 0, False
        while (read < MAX_DRAIN and parts < MAX_DRAIN_PARTS and held < self._max_held
               and not self._stopping.is_set()):
            try:
                first = sock.recv(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            message = read_message_now(sock, first, MAX_PARTS, self._max_bytes, self._stopping)
            read += 1
            self.received += 1     # counted before its outcome: received never lags rejected
            if isinstance(message, Dropped):
                parts += message.parts
                rejected, now_evict = self._drops.judge(ch.name, message, time.monotonic())
                self._reject(ch, rejected)
                evict |= now_evict
            else:
                parts += len(message)
                batch.append(message)
                held += sum(len(part) for part in message)
        if evict:
            self._evicted(ch)
            rebind_now(sock, ch.cfg.mode, ch.endpoint if ch.cfg.mode == "bind" else ch.cfg.address, self._stopping)
            if ch.cfg.mode == "bind":
                ch.peers.clear()  # libzmq reports no disconnect for the sessions an unbind ends
        if not batch:
            return
        latest = LatestWins(self._modes)
        index = len(batch) - 1
        while index >= 0 and (self._budget is None or len(batch) - index <= self._budget):
            decoded = self._decode(batch[index])
            if decoded is not None:
                latest.offer(index, decoded)
            index -= 1
        self.superseded += latest.superseded + index + 1  # older frames left undecoded
        for kept in latest.kept():
            self._apply(ch, kept)

    def _decode(self, frames: list[bytes]) -> object | None:
        ch = self.ch
        try:
            message = decode_envelope(unpack_frames(frames, ch.topic, self._max_bytes))
            expect_type(message, cast(type, ch.accepts))   # every receiving channel accepts one type
        except Rejected as rejected:
            self._reject(ch, rejected)
            return None
        return message
