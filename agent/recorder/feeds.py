"""What feeds the recorder thread: its bounded queues (:class:`BoundedQueue`), the log tap
(:class:`LogTap`), and its two small tasks on the event loop: link states and camera frames.

The tasks only read and await (an adapter's ``status()``, the video hub's ``next_encoded``) and hand what
they got to the recorder's bounded queues; the recorder thread does the rest (agent.recorder.recorder).
Their pauses end on the event loop's shared wake-up grid (agent.support.beat).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Any

from agent.support import beat

log = logging.getLogger(__name__)


class BoundedQueue:
    """A bounded deque whose producers never wait: a full queue drops the new item and counts it."""

    def __init__(self, size: int) -> None:
        self.items: deque[Any] = deque()
        self.size = size
        self.dropped = 0

    def put(self, item: Any) -> None:
        if len(self.items) >= self.size:
            self.dropped += 1
        else:
            self.items.append(item)

    def take(self) -> list[Any]:
        out = []
        pop = self.items.popleft
        for _ in range(len(self.items)):
            out.append(pop())
        return out


class LogTap(logging.Handler):
    """Queues records at WARNING and above for the recorder (never blocks)."""

    def __init__(self, queue: BoundedQueue) -> None:
        super().__init__(logging.WARNING)
        self.queue = queue

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.queue.put((record, record.getMessage()))
        except Exception:  # noqa: BLE001 - a bad format string must not reach the caller
            self.queue.put((record, str(record.msg)))


#: link states are read this often, s (each read builds every adapter's status(); a state lasting less may go unseen)
LINK_POLL_S = 0.25


async def watch_links(recorder: Any, adapters: dict[str, Any]) -> None:
    """Queue every change of a link's state (adapter ``status()``: state, connected, ARTEX ``ready``, last
    error, ``connect_failures``) as a ``/links`` event (``connect``, ``ready``, ``drop``, or the new state:
    ``connecting`` / ``down`` while the reconnect loop backs off) until cancelled."""
    seen: dict[str, tuple[str, bool, bool | None]] = {}
    loop = asyncio.get_running_loop()
    due = loop.time()
    while True:
        for name, adapter in list(adapters.items()):
            try:
                st = adapter.status()
                state = getattr(st.state, "value", str(st.state))
                ready = _ready(st.detail.get("ready"))
                key = (state, bool(st.connected), ready)
                failures = int(st.counters.get("connect_failures", 0))
            except Exception:  # noqa: BLE001 - an adapter's status bug must not stop the watch
                continue
            before = seen.get(name)
            if before != key:
                seen[name] = key
                events = []
                if key[1] and (before is None or not before[1]):
                    events.append("connect")
                if key[1] and ready and (before is None or not before[2] or not before[1]):
                    events.append("ready")     # past the handshake (within the same poll as connect, often)
                if not key[1] and before is not None and before[1]:
                    events.append("drop")
                for event in events or [state]:    # connecting / down: the reconnect loop's backoff streak
                    recorder.event("/links", time.time(), {"link": name, "state": state, "connected": key[1],
                                                           "ready": ready, "event": event, "failures": failures,
                                                           "last_error": str(st.last_error or "")})
        due = max(due + LINK_POLL_S, loop.time())    # a schedule: its rate kept on the grid
        await beat.sleep(due - loop.time())


def _ready(value: Any) -> bool | None:
    """A link's ``ready`` detail (ARTEX: ``"init"`` / ``"ok"``; a bool elsewhere) as a bool; None without one."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return value.lower() in ("ok", "ready", "true")
    return None


async def watch_camera(recorder: Any, video: Any, camera_id: str, fps: float, quality: int) -> None:
    """Queue one JPEG of ``camera_id`` every ``1/fps`` s until cancelled.

    The frame is asked for in ARTEX's own format (``FrameFormat("jpeg", quality=artex.jpeg_quality)``):
    the hub encodes a frame once per format, so while ARTEX streams the recorder gets ARTEX's JPEG.
    """
    from agent.video import FrameFormat
    fmt = FrameFormat("jpeg", quality=quality)
    period, after = 1.0 / fps, 0
    loop = asyncio.get_running_loop()
    while True:
        started = loop.time()
        try:
            enc = await video.next_encoded(camera_id, fmt, after, period * 2)
        except Exception as err:  # noqa: BLE001 - a camera error: skip this frame, keep going
            log.debug("recorder: camera %s: %s", camera_id, err)
            enc = None
        if enc is not None:
            after = enc.seq
            recorder.frame(camera_id, enc.t_unix_s, bytes(enc.data))
        await beat.sleep(max(0.0, period - (loop.time() - started)))
