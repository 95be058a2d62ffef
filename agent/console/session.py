"""One open console tab: its WebSocket, the messages it sends, the frames and state it gets.

Three tasks per tab, all on the event loop:

- the reader decodes and checks every message (agent.console.messages) and submits commands
  to the control loop as source ``console``; a bad message is answered with an ``error``
  message, counted and logged (rate-limited), and changes nothing. A drive is submitted only
  from the tab in control (agent.console.server.Control); the first drive of a new press
  (``"press": true``) is preceded by an explicit ``BaseVelocity(0, 0)``, which is how the
  control loop's stop model recognises a re-engaged source (docs/safety.md). After a stop from
  any tab, or after taking control, the tab in control drives again only once it let go (its
  zero drive) or pressed anew. A stop from any tab is submitted at once, as are the e-stop (``estop``, by ``console``) and its release;
- the frame sender sends the newest JPEG (one binary message) only after the page said
  ``frame`` (it showed the previous one), so a slow page gets fewer frames, never a backlog,
  and only what the tab's link carries (agent.console.video: one frame on the path at a time,
  sized and spaced to the rate learned from how long frames take to drain);
- the state sender sends a ``state`` message ``console.state_hz`` times per second.

Nothing the reader does waits for the way down: its ``error`` answers are sent by their own
task, so a STOP read behind a refused drive is submitted at once however slow the link is;
frames are written without the send lock (aiohttp writes an uncompressed message whole,
before it awaits anything), so a ``state`` message never waits for a frame to drain.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from typing import TYPE_CHECKING, Any

from aiohttp import WSCloseCode, WSMsgType, web

from agent.console.messages import SOURCE, Drive, EStop, FrameReady, ReleaseEStop, TakeControl, decode, parse
from agent.console.state import state_message
from agent.console.video import TabVideo
from agent.errors import CommandError
from agent.support import beat
from agent.support.ratelimit import safe
from agent.commands import BaseVelocity, Stop

if TYPE_CHECKING:
    from agent.console.server import Console

log = logging.getLogger(__name__)

#: Largest WebSocket message of a tab read at all, bytes (``console.max_message_bytes``, at most this,
#: is checked after); a larger one closes the tab with 1009, as aiohttp cannot skip it
WS_MAX_BYTES = 64 * 1024


class Session:
    """One tab (``id``: 1, 2, ... per console). ``run()`` serves it until the socket closes; the
    console then releases the source if this tab held control."""

    def __init__(self, console: Console, ws: web.WebSocketResponse, peer: str, tab_id: int = 0,
                 transport: Any = None) -> None:
        self.console = console
        self.ws = ws
        self.peer = peer
        self.id = tab_id
        self._tasks: set[asyncio.Task] = set()
        self._send_lock = asyncio.Lock()
        self._want_frame = asyncio.Event()
        self._want_frame.set()            # the first frame needs no request
        #: this tab's frames, fitted and paced to its link (None without a camera)
        self.video: TabVideo | None = None
        if console.camera is not None:
            self.video = TabVideo(console.video, console.camera, console.frame_format, transport,
                                  console.settings.max_fps)

    async def run(self) -> None:
        """Send the hello, then read until the page closes; the senders stop with the reader."""
        await self._send_json({**self.console.hello(), "control": self.console.control_of_tabs.info(self)})
        tasks = [asyncio.create_task(self._state_loop(), name="console-state")]
        if self.console.camera is not None:
            tasks.append(asyncio.create_task(self._frame_loop(), name="console-frames"))
        try:
            async for msg in self.ws:
                if msg.type in (WSMsgType.TEXT, WSMsgType.BINARY):
                    await self._handle(msg.data)
                else:                      # ERROR; CLOSE ends the iteration itself
                    self._closed_on_error(msg.data)
                    break
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, ConnectionError, RuntimeError):
                    await task

    def _closed_on_error(self, err: object) -> None:
        """aiohttp closed the tab's WebSocket on ``err`` (a message over :data:`WS_MAX_BYTES`: 1009, or a
        protocol error: 1002): it cannot skip such a frame, so the tab ends; counted and said (a message's
        size in the agent's own words and limit: aiohttp's text gives its ``max_msg_size``, one more). A ping
        the tab did not answer is no message: said at INFO, not counted as rejected."""
        console = self.console
        if isinstance(err, asyncio.TimeoutError):   # aiohttp's heartbeat: no pong (network gone, page asleep)
            log.info("console: tab %d (%s) did not answer the WebSocket ping (%s); its connection is closed",
                     self.id, self.peer, safe(str(err), 80))
            return
        console.counters["received"] += 1
        console.counters["rejected"] += 1
        size = re.match(r"Message size (\d+) exceeds limit", str(err))
        if getattr(err, "code", None) == WSCloseCode.MESSAGE_TOO_BIG and size:
            why, detail = f"message of {size[1]} bytes, over the {WS_MAX_BYTES}-byte limit (1009)", f"{size[1]} bytes"
        else:
            why, detail = safe(str(err), 200), str(err)   # (a detail is escaped where logged)
        console.warn.log(logging.WARNING, ("closed", self.peer, type(err).__name__),
                         "console: rejected message from %s: %s; the tab's connection is closed",
                         self.peer, why, detail=detail)

    async def _handle(self, raw: object) -> None:
        console = self.console
        console.counters["received"] += 1
        try:
            parsed = parse(decode(raw, console.settings.max_message_bytes), console.limits)
        except CommandError as err:
            console.counters["rejected"] += 1
            console.warn.log(logging.WARNING, ("rejected", self.peer, err.reason),  # by reason, not text
                             "console: rejected message from %s: %s", self.peer, safe(str(err), 200),
                             detail=err.detail)
            self._spawn(self._send_json({"type": "error", "message": f"rejected: {err}"}))
            return
        if isinstance(parsed, FrameReady):
            self._want_frame.set()
            return
        if isinstance(parsed, TakeControl):
            console.take(self)
            console.counters["executed"] += 1
            return
        try:
            if isinstance(parsed, Drive):
                self._drive(parsed)
            elif isinstance(parsed, EStop):
                console.stopped(self, "e-stop")
                console.control.estop(SOURCE, f"STOP button on console tab {self.id} ({self.peer})")
            elif isinstance(parsed, ReleaseEStop):
                console.control.release_estop(SOURCE)
                log.warning("console: tab %d (%s) released the emergency stop", self.id, self.peer)
            else:
                if isinstance(parsed, Stop):
                    console.stopped(self)
                console.control.submit(SOURCE, parsed)   # the control loop logs its own refusals
        except CommandError as err:
            console.counters["refused"] += 1
            self._spawn(self._send_json({"type": "error", "message": f"refused: {err}"}))
            return
        console.counters["executed"] += 1

    def _drive(self, drive: Drive) -> None:
        """Submit ``drive`` if this tab may drive; a press submits a zero first (re-engage).
        Raises CommandError (the console's or the control loop's refusal)."""
        velocity = drive.velocity
        still = velocity.vx == 0.0 and velocity.omega == 0.0
        letting_go = still and self.console.control_of_tabs.holder is self
        if not letting_go:                      # letting go never needs a press
            self.console.may_drive(self, drive.press)
        if drive.press and not still:
            self.console.control.submit(SOURCE, BaseVelocity(0.0, 0.0))
        self.console.control.submit(SOURCE, velocity)
        if letting_go or drive.press:           # accepted: the next drive of this tab goes on
            self.console.control_of_tabs.pressed(self)

    def control_changed(self) -> None:
        """Control moved between tabs: send this tab the new ``control`` message (not awaited)."""
        self._spawn(self._send_json({"type": "control", **self.console.control_of_tabs.info(self)}))

    def notify(self, message: str) -> None:
        """Show ``message`` on this tab's page (an ``error`` message; not awaited)."""
        self._spawn(self._send_json({"type": "error", "message": message}))

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _state_loop(self) -> None:
        period = 1.0 / self.console.settings.state_hz
        loop = asyncio.get_running_loop()
        due = loop.time()
        while True:
            message = state_message(self.console.control.snapshot(), dict(self.console.status()),
                                    self.console.link_warnings())
            message["control"] = self.console.control_of_tabs.info(self)
            await self._send_json(message)
            # on a schedule whose pauses end on the event loop's shared wake-up grid (agent/support/beat.py):
            # state_hz on average, each message at most 10 ms off its time; a late one skips ahead
            due = max(due + period, loop.time())
            await beat.sleep(due - loop.time())

    async def _frame_loop(self) -> None:
        console, video = self.console, self.video
        assert video is not None
        while True:
            await self._want_frame.wait()
            got = await video.next()
            if got is None or self.ws.closed:
                continue
            frame, data = got
            self._want_frame.clear()
            start = video.clock()
            try:
                await self.ws.send_bytes(data)
            except ConnectionError:        # the page went away; the reader ends the session
                return
            console.counters["frames_sent"] += 1
            await video.sent(frame, len(data), start)

    async def _send_json(self, message: dict[str, Any]) -> None:
        if self.ws.closed:
            return
        async with self._send_lock:
            with contextlib.suppress(ConnectionError):  # the page went away; the reader ends the session
                await self.ws.send_json(message)
