"""One open console tab: its WebSocket, the messages it sends, the frames and state it gets.

Three tasks per tab, all on the event loop:

- the reader decodes and checks every message (agent.console.messages) and submits commands
  to the control loop as source ``console``; a bad message is answered with an ``error``
  message, counted and logged (rate-limited), and changes nothing;
- the frame sender sends the newest JPEG (one binary message) only after the page said
  ``frame`` (it showed the previous one), so a slow page gets fewer frames, never a backlog;
- the state sender sends a ``state`` message ``console.state_hz`` times per second.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from aiohttp import WSMsgType, web

from agent.console.messages import SOURCE, FrameReady, decode, parse
from agent.console.state import state_message
from agent.errors import CommandError
from agent.ratelimit import safe
from agent.model import BaseVelocity

if TYPE_CHECKING:
    from agent.console.server import Console

log = logging.getLogger(__name__)

#: How long one wait for a camera frame lasts before it is retried, s.
FRAME_WAIT_S = 1.0


class Session:
    """One tab. ``run()`` serves it until the socket closes; the caller releases the source."""

    def __init__(self, console: Console, ws: web.WebSocketResponse, peer: str) -> None:
        self.console = console
        self.ws = ws
        self.peer = peer
        self._send_lock = asyncio.Lock()
        self._want_frame = asyncio.Event()
        self._want_frame.set()            # the first frame needs no request

    async def run(self) -> None:
        """Send the hello, then read until the page closes; the senders stop with the reader."""
        await self._send_json(self.console.hello())
        tasks = [asyncio.create_task(self._state_loop(), name="console-state")]
        if self.console.camera is not None:
            tasks.append(asyncio.create_task(self._frame_loop(), name="console-frames"))
        try:
            async for msg in self.ws:
                if msg.type in (WSMsgType.TEXT, WSMsgType.BINARY):
                    await self._handle(msg.data)
                else:                      # ERROR; CLOSE ends the iteration itself
                    break
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, ConnectionError, RuntimeError):
                    await task

    async def _handle(self, raw: object) -> None:
        console = self.console
        console.counters["received"] += 1
        try:
            parsed = parse(decode(raw, console.settings.max_message_bytes), console.limits)
        except CommandError as err:
            console.counters["rejected"] += 1
            console.warn.log(logging.WARNING, ("rejected", self.peer, err.reason),  # by reason, not text
                             "console: rejected message from %s: %s", self.peer, safe(str(err), 200))
            await self._send_json({"type": "error", "message": f"rejected: {err}"})
            return
        if isinstance(parsed, FrameReady):
            self._want_frame.set()
            return
        try:
            console.control.submit(SOURCE, parsed)   # the control loop logs its own refusals
        except CommandError as err:
            console.counters["refused"] += 1
            await self._send_json({"type": "error", "message": f"refused: {err}"})
            return
        console.counters["executed"] += 1
        if isinstance(parsed, BaseVelocity):
            console.driver = self

    async def _state_loop(self) -> None:
        period = 1.0 / self.console.settings.state_hz
        while True:
            await self._send_json(state_message(self.console.control.snapshot(), dict(self.console.status()),
                                                self.console.link_warnings()))
            await asyncio.sleep(period)

    async def _frame_loop(self) -> None:
        console = self.console
        loop = asyncio.get_running_loop()
        min_gap = 1.0 / console.settings.max_fps
        seq, last = -1, -min_gap
        while True:
            await self._want_frame.wait()
            gap = last + min_gap - loop.time()
            if gap > 0:
                await asyncio.sleep(gap)
            frame = await console.video.next_encoded(console.camera, console.frame_format, seq, FRAME_WAIT_S)
            if frame is None:
                continue
            self._want_frame.clear()
            seq, last = frame.seq, loop.time()
            async with self._send_lock:
                await self.ws.send_bytes(frame.data)
            console.counters["frames_sent"] += 1

    async def _send_json(self, message: dict[str, Any]) -> None:
        if self.ws.closed:
            return
        async with self._send_lock:
            with contextlib.suppress(ConnectionError):  # the page went away; the reader ends the session
                await self.ws.send_json(message)
