"""ARTEX ``telem`` and ``video`` streams: the two sending tasks of the adapter.

Started by the hub's ``Ready`` (each only if ``telem_can`` / ``video_can``),
stopped when the link drops. Both read the configuration in force on every
round, so ``web_settings`` changes of ``max_send_freq`` and ``jpeg_quality``
apply at once.

Both send at most every ``max_send_freq`` s, and never faster than every
:data:`MIN_SEND_PERIOD_S` (0.02 s) whatever ``max_send_freq`` says.

- ``telem``: every ``max_send_freq`` s the whole dict (agent.adapters.artex_telem),
  sent only if it changed beyond the deadbands since the last send, or a value
  settled (:class:`agent.adapters.artex_telem.TelemGate`).
- ``video``: ``{camera_id: JPEG bytes}`` for the cameras with a frame newer than the
  last one sent, no two sends closer than ``max_send_freq`` s (ARTEX protocol page,
  "video"). Keys containing ``led`` or ``rgb_strip`` are sent as they are, not
  JPEG-encoded (SDK ``Vault_Video_mixin.set_video``): the raw frame bytes
  (``Frame.image``: BGR uint8, rows top-down, ``height * width * 3`` bytes).
  Encoding happens once per frame and format in the shared
  :class:`agent.video.VideoHub`, off the event loop.

Video budgets (``video`` config section, docs/artex.md "Video budget"): a message
never exceeds ``max_message_bytes`` on the wire (each camera gets its share; a
bigger frame is re-encoded at a lower quality, then smaller, else skipped, counted
and logged once); at most one ``video`` message is in flight (the next waits until
Engine.IO, the transport and the kernel wrote the last one); a frame older than
``max_frame_age_s`` is never sent; slow drains move the camera down the
re-encode ladder and quick ones back up. ``telem`` carries ``video``: per camera
frame age p50/p95 (capture -> handed to the socket), ladder level, throughput.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from agent.adapters.artex_telem import TelemGate, telemetry
from agent.config import AgentConfig
from agent.ports import RobotPort, VideoPort
from agent.config.video import VideoConfig
from agent.video import FrameFormat, LinkPacer
from agent.video.links import shrink_send_buffer, transport_backlog, wait_drained

log = logging.getLogger(__name__)

__all__ = ["ArtexStreams", "ArtexVideo", "is_raw_key", "link_backlog"]

RAW_MARKERS = ("led", "rgb_strip")
#: Shortest period between two sends of one stream, s. A shorter ``max_send_freq`` (the config allows
#: any value above 0) acts as this: a near-zero period would spin the event loop and starve the
#: control loop thread of the GIL, delaying even the watchdog's stop.
MIN_SEND_PERIOD_S = 0.02

#: Bytes of a ``video`` message besides the frames (event name, namespace, placeholders, keys).
PAYLOAD_OVERHEAD = 512
#: Video stats ride in ``telem`` at least this often while they change, s.
VIDEO_TELEM_PERIOD_S = 2.0
#: Longest wait for the link to write one frame before the wait is counted as a skip, s.
DRAIN_WAIT_S = 1.0

Emit = Callable[[str, dict[str, Any]], Awaitable[bool]]


def is_raw_key(camera_id: str) -> bool:
    """True when the SDK sends this key's value as is (``led`` / ``rgb_strip`` in the id)."""
    low = camera_id.lower()
    return any(m in low for m in RAW_MARKERS)


def link_backlog(client: Any) -> int:
    """What the Socket.IO ``client`` still has to write: Engine.IO packets queued or being
    written (each counts 1), plus the websocket transport's write buffer and kernel send queue, bytes.
    0 without a connection."""
    eio = getattr(client, "eio", None)
    if eio is None:
        return 0
    queue = getattr(eio, "queue", None)
    # asyncio.Queue counts a packet until the write loop's task_done(), i.e. until it is written
    packets = getattr(queue, "_unfinished_tasks", 0) if queue is not None else 0
    writer = getattr(getattr(eio, "ws", None), "_writer", None)
    return packets + transport_backlog(getattr(writer, "transport", None))


def link_transport(client: Any) -> Any:
    """The websocket transport of a Socket.IO ``client``, or None."""
    return getattr(getattr(getattr(getattr(client, "eio", None), "ws", None), "_writer", None), "transport", None)


class ArtexVideo:
    """Newest frame per camera as ARTEX ``video`` payload values, within the link's budgets.

    Args:
        hub: the shared video hub (``camera_ids``, ``next_frame``, ``encoded_within``).
        budget: the ``video`` config section (``max_message_bytes``, ``max_frame_age_s``).
        counters: the adapter's counters (``video_reencoded``, ``video_oversize_skipped``,
            ``video_too_old``).
    """

    def __init__(self, hub: VideoPort, budget: VideoConfig, counters: Counter[str],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._hub = hub
        self._budget = budget
        self._counters = counters
        self._clock = clock
        self._after: dict[str, int] = {}
        self.pacers = {cam: LinkPacer(budget.max_frame_age_s, 0.05, clock) for cam in hub.camera_ids}
        self._oversize_logged: set[str] = set()

    @property
    def camera_ids(self) -> tuple[str, ...]:
        """Cameras streamed, in config order."""
        return tuple(self._hub.camera_ids)

    def _oversize(self, camera_id: str, size: int, limit: int) -> None:
        self._counters["video_oversize_skipped"] += 1
        if camera_id not in self._oversize_logged:
            self._oversize_logged.add(camera_id)
            log.warning("ARTEX: camera %s frame of %d bytes does not fit the %d-byte message budget even "
                        "at the smallest size; skipped (counted in video_oversize_skipped, logged once)",
                        camera_id, size, limit)

    async def _next(self, camera_id: str, quality: int, wait_s: float, limit: int) -> tuple[str, Any]:
        pacer = self.pacers[camera_id]
        frame = await self._hub.next_frame(camera_id, self._after.get(camera_id, 0), wait_s)
        if frame is None:
            return camera_id, None
        self._after[camera_id] = frame.seq
        if is_raw_key(camera_id):
            data = frame.image.tobytes()
            if len(data) > limit:
                self._oversize(camera_id, len(data), limit)
                return camera_id, None
            return camera_id, (data, frame.t_mono_s)
        fmt = FrameFormat("jpeg", quality=quality)
        out, level = await self._hub.encoded_within(frame, fmt, limit, pacer.level)
        if out is None:
            self._oversize(camera_id, frame.width * frame.height, limit)
            return camera_id, None
        if level > 0:
            self._counters["video_reencoded"] += 1
        pacer.level = level
        return camera_id, (out.data, out.t_mono_s)

    async def next_payload(self, quality: int, wait_s: float) -> dict[str, bytes]:
        """Frames newer than the last ones returned, waiting up to ``wait_s`` s per camera.

        Each frame fits its share of ``max_message_bytes`` (re-encoded smaller or skipped);
        a frame older than ``max_frame_age_s`` by now is left out (``video_too_old``).

        Returns:
            camera id -> JPEG (or raw) bytes, only the cameras that produced a new, fresh frame.
        """
        cams = self.camera_ids
        limit = (self._budget.max_message_bytes - PAYLOAD_OVERHEAD) // max(1, len(cams)) - 64
        got = await asyncio.gather(*(self._next(cam, quality, wait_s, limit) for cam in cams))
        payload: dict[str, bytes] = {}
        for cam, item in got:
            if item is None:
                continue
            if not self.pacers[cam].fresh(item[1]):
                self._counters["video_too_old"] += 1
                continue
            payload[cam] = item[0]
            self.pacers[cam].handed(item[1])
        return payload

    def drained(self, payload: dict[str, bytes], seconds: float, period_s: float) -> None:
        """The link took ``seconds`` to write ``payload``: adapt every camera in it."""
        for cam, data in payload.items():
            self.pacers[cam].period_s = period_s
            self.pacers[cam].drained(len(data), seconds)

    def telem(self) -> dict[str, dict[str, Any]]:
        """Per camera: frame age p50/p95 (capture -> handed to the socket, s), ladder level,
        measured link throughput (kB/s), frames sent; plus the link counters."""
        out: dict[str, Any] = {}
        for cam, pacer in self.pacers.items():
            ages = pacer.age_stats()
            out[cam] = {"age_p50_s": _round(ages["p50_s"]), "age_p95_s": _round(ages["p95_s"]),
                        "level": pacer.level, "kBps": round(pacer.throughput_bps / 1000, -1)}
        for key in ("video_reencoded", "video_oversize_skipped", "video_too_old"):
            out[key.removeprefix("video_")] = self._counters[key]
        return out


def _round(value: float | None) -> float | None:
    """Ages to 0.05 s: the telem deadband would otherwise see a change on every poll."""
    return None if value is None else round(value * 20) / 20


def _alive(task: asyncio.Task | None) -> bool:
    return task is not None and not task.done()


class ArtexStreams:
    """The telem and video tasks of one ARTEX connection.

    Args:
        cfg: configuration in force; the adapter replaces :attr:`cfg` after ``web_settings``.
        robot: the RobotPort (``snapshot``).
        video: the shared video hub, or None (no video stream).
        emit: ``await emit(event, data) -> sent`` on the ``/robot`` namespace.
        link: the Socket.IO client of the link now, or None (its backlog: :func:`link_backlog`).
        counters: the adapter's counters (``video_skipped``, ``video_reencoded``,
            ``video_oversize_skipped``, ``video_too_old``).
        clock, sleep: monotonic clock (s) and pause coroutine of both loops (injected in tests).
    """

    def __init__(self, cfg: AgentConfig, robot: RobotPort, video: VideoPort | None, emit: Emit,
                 link: Callable[[], Any], counters: Counter[str], *,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> None:
        self.cfg = cfg
        self._clock, self._sleep = clock, sleep
        self._robot = robot
        self._video = ArtexVideo(video, cfg.video, counters, clock) if video is not None and video.camera_ids else None
        self._emit = emit
        self._link = link
        self._counters = counters
        self._telem: asyncio.Task | None = None
        self._frames: asyncio.Task | None = None
        self._video_sent: dict[str, Any] = {}
        self._video_sent_at = -float("inf")

    @property
    def has_video(self) -> bool:
        """A camera exists to stream."""
        return self._video is not None

    @property
    def period_s(self) -> float:
        """Seconds between sends now: ``max_send_freq``, at least :data:`MIN_SEND_PERIOD_S`."""
        return max(self.cfg.max_send_freq, MIN_SEND_PERIOD_S)

    @property
    def telem_run(self) -> bool:
        """The telem task is running (``d_meta`` ``telem_run``)."""
        return _alive(self._telem)

    @property
    def video_run(self) -> bool:
        """The video task is running (``d_meta`` ``video_run``)."""
        return _alive(self._frames)

    def start(self) -> None:
        """Start the streams ``telem_can`` / ``video_can`` allow that are not running. On the event loop."""
        loop = asyncio.get_running_loop()
        if self.cfg.telem_can and not self.telem_run:
            self._telem = loop.create_task(self._telem_loop(), name="artex-telem")
            self._telem.add_done_callback(_report)
        if self.cfg.video_can and self._video is not None and not self.video_run:
            self._frames = loop.create_task(self._video_loop(), name="artex-video")
            self._frames.add_done_callback(_report)

    def stop(self, telem: bool = True, video: bool = True) -> None:
        """Cancel the chosen streams (both by default)."""
        for wanted, task in ((telem, self._telem), (video, self._frames)):
            if wanted and task is not None:
                task.cancel()

    async def close(self) -> None:
        """Cancel both streams and wait for them to end."""
        self.stop()
        for task in (self._telem, self._frames):
            if task is not None:
                await asyncio.wait([task])

    async def _telem_loop(self) -> None:
        gate = TelemGate()
        while True:
            await self._sleep(self.period_s)
            data = telemetry(self._robot.snapshot())
            due = gate.due(data)
            extra = self._video_telem(due)
            if (due or extra) and await self._emit("telem", {"payload": {**data, **extra}}):
                gate.mark_sent(data)

    def _video_telem(self, due: bool) -> dict[str, Any]:
        """``{"video": stats}`` when telem goes out anyway, or every :data:`VIDEO_TELEM_PERIOD_S` s
        when the stats changed; else ``{}`` (the frame ages change on every poll)."""
        if self._video is None or not self.video_run:
            return {}
        stats = self._video.telem()
        now = self._clock()
        if due or (stats != self._video_sent and now - self._video_sent_at >= VIDEO_TELEM_PERIOD_S):
            self._video_sent, self._video_sent_at = stats, now
            return {"video": stats}
        return {}

    async def _video_loop(self) -> None:
        assert self._video is not None
        last = -float("inf")
        while True:
            period = self.period_s
            wait = last + period - self._clock()
            if wait > 0:
                await self._sleep(wait)
            payload = await self._video.next_payload(self.cfg.artex.jpeg_quality, period)
            start = self._clock()
            if not payload or not await self._emit("video", {"payload": payload}):
                continue
            last = start
            await self._drain(payload, period)

    async def _drain(self, payload: dict[str, bytes], period: float) -> None:
        """One frame in flight: wait until the link wrote ``payload``, then adapt to how long it took."""
        assert self._video is not None
        client = self._link()
        shrink_send_buffer(link_transport(client))
        start = self._clock()
        while not await wait_drained(lambda: link_backlog(client), DRAIN_WAIT_S, clock=self._clock):
            self._counters["video_skipped"] += 1    # a whole wait with the link still busy
            if client is not self._link() or not getattr(client, "connected", False):
                return
        self._video.drained(payload, self._clock() - start, period)


def _report(task: asyncio.Task) -> None:
    """A stream that ended by itself is a bug: log it (cancellation is the normal end)."""
    if not task.cancelled() and task.exception() is not None:
        log.error("ARTEX: %s stream failed", task.get_name(), exc_info=task.exception())
