"""A loopback TCP proxy that can black-hole or throttle a link, for tests and benchmarks.

Stands between the agent and a real peer (ARTEX hub, Sim2Bot bridge) on 127.0.0.1 to
play the field's bad networks:

- ``blackhole = True``: every connection stays open but nothing is delivered either way,
  as when a Wi-Fi path dies without a FIN or RST: bytes wait (the senders' socket buffers
  fill) and flow again when the path returns, as TCP's retransmissions would deliver them;
  a connection accepted meanwhile reaches the peer only when the path returns;
- ``rate_bps``: each direction is paced to that many bytes per second (1 Mbit/s =
  125_000), reading from the sender only as fast as it forwards, so the sender's own
  socket buffers fill as they would behind a slow radio link;
- ``shared=True``: that rate is one path's, shared by every connection through the proxy
  (a chunk at a time, in the order they are read), as two sockets of one robot share its
  Wi-Fi; otherwise each connection gets the full rate.

Usage::

    async with TcpProxy("127.0.0.1", hub_port) as proxy:
        url = f"http://127.0.0.1:{proxy.port}"
        proxy.blackhole = True     # the path dies
        proxy.blackhole = False    # ... and comes back
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time

__all__ = ["TcpProxy"]

#: a throttled connection's window, seconds of its rate: its sockets' receive buffers and the bytes
#: forwarded per write. What the proxy holds unsent is then about what a real path has in flight, so a
#: sender's kernel send queue (SIOCOUTQ: bytes not yet acknowledged) shows the backlog as it would
#: behind a radio link: with the kernel's doubling of a receive buffer and the proxy's read buffer,
#: measured 0.5 s of a 300 kbit/s path, 0.3 s of a 1 Mbit/s one
#: (docs/benchmarks.md, "Slow shared path"). A fixed 4 KiB window was reported to carry only ~40 kB/s of an asked 125 kB/s (the window
#: and the kernel's ACK timing cap a loopback connection); 1/8 s of the rate carries 92-99 % of it.
WINDOW_S = 0.125
#: the smallest window, bytes (the kernel doubles a receive buffer for its bookkeeping)
MIN_WINDOW = 4096
#: the receive buffer an unthrottled connection gets when a live proxy's rate is lifted, bytes (a
#: buffer once set stays fixed: the kernel no longer tunes it)
OPEN_WINDOW = 1 << 20
#: StreamReader limit of a throttled connection: the proxy itself buffers at most about twice this
READ_LIMIT = 4096


def window(rate_bps: float | None) -> int:
    """A connection's window for ``rate_bps`` (bytes/s, None = unpaced): bytes (WINDOW_S of the rate,
    at least MIN_WINDOW; unpaced OPEN_WINDOW)."""
    if not rate_bps:
        return OPEN_WINDOW
    return max(MIN_WINDOW, int(rate_bps * WINDOW_S))


class TcpProxy:
    """Forward ``host:port`` (ours, 0 = any free port) to ``target_host:target_port``.

    Attributes:
        port: the listening port once started.
        blackhole: True holds every byte both ways (connections stay open) until set False.
        rate_bps: bytes per second per direction, None = unpaced; settable on a live proxy (its open
            connections' receive buffers follow: see ``window``).
        shared: the rate is shared by all connections (per direction), not each one's.
        connections: connections accepted so far.
        carried: bytes forwarded so far per direction, ``{"up": n, "down": n}`` ("up" = towards the
            target).
    """

    def __init__(self, target_host: str, target_port: int, *, host: str = "127.0.0.1",
                 port: int = 0, rate_bps: float | None = None, shared: bool = False) -> None:
        self.target = (target_host, target_port)
        self.host, self.port = host, port
        self._rate_bps = rate_bps
        self.shared = shared
        self.carried = {"up": 0, "down": 0}
        self._next_t = {"up": 0.0, "down": 0.0}    # shared: when each direction's path is free again
        self.connections = 0
        self._path = asyncio.Event()
        self._path.set()
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def rate_bps(self) -> float | None:
        return self._rate_bps

    @rate_bps.setter
    def rate_bps(self, rate_bps: float | None) -> None:
        """Change the rate, on the proxy's event loop thread: new chunks are paced to it and every open
        connection's receive buffers are resized to its window (unpaced: OPEN_WINDOW)."""
        self._rate_bps = rate_bps
        size = window(rate_bps)
        for writer in list(self._writers):
            self._size(writer, size)
        if self._server is not None and self._server.sockets:
            with contextlib.suppress(OSError):
                self._server.sockets[0].setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)

    @staticmethod
    def _size(writer: asyncio.StreamWriter, size: int) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)

    @property
    def blackhole(self) -> bool:
        return not self._path.is_set()

    @blackhole.setter
    def blackhole(self, dead: bool) -> None:
        if dead:
            self._path.clear()
        else:
            self._path.set()

    async def start(self) -> "TcpProxy":
        # throttled: small buffers, as a radio link's, so a backlog stays with the sender (its own
        # socket buffer, where a real sender sees it) instead of hiding in this proxy
        limit = READ_LIMIT if self.rate_bps else 1 << 16
        if self.rate_bps:
            # the receive buffer set before listen(): accepted connections start with the small window
            # (set after the handshake, the kernel keeps the window it already offered)
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, window(self.rate_bps))
            listener.bind((self.host, self.port))
            self._server = await asyncio.start_server(self._serve, sock=listener, limit=limit)
        else:
            self._server = await asyncio.start_server(self._serve, self.host, self.port, limit=limit)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        """Stop listening and cut every connection (RST-free close both ways)."""
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for writer in list(self._writers):
            writer.close()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)

    def cut(self) -> None:
        """Close every open connection now (a peer that resets); new ones are still accepted."""
        for writer in list(self._writers):
            writer.close()

    async def __aenter__(self) -> "TcpProxy":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _serve(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        self._tasks.add(task)
        self._writers.add(c_writer)
        try:
            await self._path.wait()  # accepted during a black-hole: the SYN "arrives" when it ends
            u_reader, u_writer = await asyncio.open_connection(*self.target,
                                                               limit=READ_LIMIT if self.rate_bps else 1 << 16)
            if self.rate_bps:
                for writer in (c_writer, u_writer):
                    self._size(writer, window(self.rate_bps))
            self._writers.add(u_writer)
            try:
                await asyncio.gather(self._pipe(c_reader, u_writer, "up"), self._pipe(u_reader, c_writer, "down"))
            finally:
                u_writer.close()
                self._writers.discard(u_writer)
        except (OSError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            # close() cancels us; ending normally keeps Python 3.11's StreamReaderProtocol callback from
            # logging the cancellation as an error (it calls task.exception() on a cancelled task)
            pass
        finally:
            c_writer.close()
            self._writers.discard(c_writer)
            self._tasks.discard(task)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, direction: str) -> None:
        """Copy one direction, holding bytes while black-holed and pacing to ``rate_bps``."""
        next_t = time.monotonic()
        try:
            while True:
                rate = self.rate_bps
                data = await reader.read(window(rate) if rate else 65536)
                if not data:
                    break
                await self._path.wait()
                rate = self.rate_bps
                if rate:
                    if self.shared:
                        next_t = self._next_t[direction] = (max(self._next_t[direction], time.monotonic())
                                                            + len(data) / rate)
                    else:
                        next_t = max(next_t, time.monotonic()) + len(data) / rate
                    await asyncio.sleep(max(0.0, next_t - time.monotonic()))
                    await self._path.wait()
                writer.write(data)
                self.carried[direction] += len(data)
                await writer.drain()
        finally:
            with contextlib.suppress(Exception):
                writer.write_eof()
