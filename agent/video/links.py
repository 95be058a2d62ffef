"""What a video link still has to write: the sender's view of "one frame in flight".

A frame counts as in flight until the library's queue, the asyncio transport's
write buffer and the kernel's send queue (``SIOCOUTQ``: bytes not yet
acknowledged by the peer) are all empty. The kernel send buffer of a video socket
is shrunk (:func:`shrink_send_buffer`) so a slow link shows up as a backlog here
instead of seconds of frames hidden in kernel buffers.
"""

from __future__ import annotations

import array
import asyncio
import fcntl
import logging
import socket
import termios
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("agent.video")

__all__ = ["SEND_BUFFER_BYTES", "shrink_send_buffer", "transport_backlog", "wait_drained"]

#: Kernel send buffer of a video socket, bytes (the kernel doubles it for bookkeeping).
SEND_BUFFER_BYTES = 32 * 1024


def _socket(transport: Any) -> socket.socket | None:
    getter = getattr(transport, "get_extra_info", None)
    return getter("socket") if getter is not None else None


def kernel_unsent(sock: Any) -> int:
    """Bytes in the kernel send queue of ``sock`` not yet acknowledged (0 when unknown)."""
    if sock is None:
        return 0
    buf = array.array("i", [0])
    try:
        fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, buf)
    except (OSError, ValueError):
        return 0
    return int(buf[0])


def transport_backlog(transport: Any) -> int:
    """Bytes an asyncio transport still has to put on the wire: its write buffer plus the kernel's."""
    if transport is None or transport.is_closing():
        return 0
    return transport.get_write_buffer_size() + kernel_unsent(_socket(transport))


def shrink_send_buffer(transport: Any, size: int = SEND_BUFFER_BYTES) -> None:
    """Set ``SO_SNDBUF`` of the transport's socket to ``size`` bytes (no-op without a socket)."""
    sock = _socket(transport)
    if sock is None:
        return
    try:
        if sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) > 2 * size:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)
    except OSError as err:
        log.debug("video: could not shrink the send buffer: %s", err)


async def wait_drained(backlog: Callable[[], int], timeout_s: float, poll_s: float = 0.002,
                       clock: Callable[[], float] = time.monotonic, max_poll_s: float | None = None) -> bool:
    """Wait until ``backlog()`` is 0; False after ``timeout_s`` s (``math.inf``: no limit).

    Polled every ``poll_s`` s; with ``max_poll_s``, each next look comes when the rest should be
    gone at the rate seen since the wait began, within ``poll_s``..``max_poll_s`` (a slow link is
    not polled hundreds of times a second, a fast one is not left idle)."""
    began = clock()
    end = began + timeout_s
    first = left = backlog()
    poll = poll_s
    while left > 0:
        if clock() >= end:
            return False
        await asyncio.sleep(poll)
        left = backlog()
        if max_poll_s is not None:
            gone = first - left
            poll = max_poll_s if gone <= 0 else min(max_poll_s, max(poll_s, left * (clock() - began) / gone))
    return True
