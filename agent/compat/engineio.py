"""python-engineio internals (pyproject.toml: ``python-engineio>=4.15,<4.16``; tested 4.15.1).

What an ``engineio.AsyncClient`` still has to send (its send queue counts a packet until its
write loop wrote it: ``asyncio.Queue``'s unfinished-task count), its websocket, and dropping
its transport without the polite close handshake.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import engineio.base_client

__all__ = ["PRIVATE", "drop_transport", "queued_packets", "read_loop_started", "websocket"]

#: ``(owner, attribute)``: every private or undocumented attribute this module reaches.
PRIVATE: tuple[tuple[str, str], ...] = (
    ("engineio.base_client", "connected_clients"),
    ("engineio.AsyncClient()", "queue"),
    ("engineio.AsyncClient()", "ws"),
    ("engineio.AsyncClient()", "http"),
    ("engineio.AsyncClient()", "state"),
    ("engineio.AsyncClient()", "read_loop_task"),
    ("engineio.AsyncClient()", "write_loop_task"),
    ("asyncio.Queue()", "_unfinished_tasks"),
)


def queued_packets(eio: Any) -> int:
    """Engine.IO packets queued or being written by ``eio`` (0 without a queue)."""
    queue = getattr(eio, "queue", None)
    return getattr(queue, "_unfinished_tasks", 0) if queue is not None else 0


def websocket(eio: Any) -> Any:
    """The aiohttp websocket of ``eio`` (an ``engineio.AsyncClient`` or None), or None."""
    return getattr(eio, "ws", None) if eio is not None else None


def read_loop_started(eio: Any) -> bool:
    """True once ``eio`` (an engineio.AsyncClient) has started its read loop (it may have ended since);
    before that (a connect in progress) its ``disconnect()`` awaits the missing task: TypeError."""
    return eio.read_loop_task is not None


async def drop_transport(eio: Any, close_timeout_s: float = 0.2) -> None:
    """End ``eio``'s connection without the close handshake: cancel its read and write loops,
    mark it disconnected, close its websocket and HTTP session quietly (``close_timeout_s`` s each)."""
    for task in (eio.read_loop_task, eio.write_loop_task):
        if task is not None and not task.done():
            task.cancel()
    eio.state = "disconnected"
    with contextlib.suppress(ValueError):
        engineio.base_client.connected_clients.remove(eio)
    ws, http = websocket(eio), eio.http
    with contextlib.suppress(Exception):  # the peer's state is unknown; close what is left, quietly
        if ws is not None and not ws.closed:
            async with asyncio.timeout(close_timeout_s):
                await ws.close()
    with contextlib.suppress(Exception):
        if http is not None and not http.closed:
            async with asyncio.timeout(close_timeout_s):
                await http.close()
    eio.http = None
