"""ARTEX ``telem`` and ``video`` streams: the two sending tasks of the adapter.

Started by the hub's ``Ready`` (each only if ``telem_can`` / ``video_can``),
stopped when the link drops. Both read the configuration in force on every
round, so ``web_settings`` changes of ``max_send_freq`` and ``jpeg_quality``
apply at once.

Video sends at most every ``max_send_freq`` s; telem polls every ``max_send_freq`` s on average,
each poll at most 10 ms off its time (the wake-up grid below); neither faster than every
:data:`MIN_SEND_PERIOD_S` (0.02 s) whatever ``max_send_freq`` says.

- ``telem``: every ``max_send_freq`` s the whole dict (agent.adapters.artex_telem; polls on a
  schedule whose pauses end on the event loop's shared wake-up grid, agent/support/beat.py: the
  rate is ``1 / max_send_freq``, each poll at most 10 ms off its time), sent if it changed beyond the deadbands since the last send, or a value
  settled (:class:`agent.adapters.artex_telem.TelemGate`), and at least every
  ``artex.telem_keepalive_s`` (1 s) even at rest, so a hub that reads telemetry as
  "last seen" never marks an idle robot stale.
- ``video``: ``{camera_id: JPEG bytes}`` with every camera's latest frame once one camera has a frame newer than the
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
re-encode ladder and quick ones back up. The adapter's ``status()`` carries ``video``:
per camera frame age p50/p95 (capture -> handed to the socket), ladder level, throughput.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from agent.adapters.artex_telem import TelemBuilder, TelemGate
from agent.adapters.artex_video import ArtexVideo, VideoDelivery, is_raw_key, link_backlog
from agent.config import AgentConfig
from agent.model import Snapshot
from agent.ports import RobotPort, VideoPort
from agent.support import beat

log = logging.getLogger(__name__)

__all__ = ["ArtexStreams", "ArtexVideo", "is_raw_key", "link_backlog"]

#: Shortest period between two sends of one stream, s. A shorter ``max_send_freq`` (the config allows
#: any value above 0) acts as this: a near-zero period would spin the event loop and starve the
#: control loop thread of the GIL, delaying even the watchdog's stop.
MIN_SEND_PERIOD_S = 0.02

Emit = Callable[[str, dict[str, Any]], Awaitable[bool]]


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
        clock, sleep: monotonic clock (s) and pause coroutine of both loops (injected in tests). None:
            the telem loop's pauses end on the event loop's shared wake-up grid (agent.support.beat,
            at most half a slot off, the rate kept), the video loop's exactly (no two sends closer
            than ``max_send_freq``).
    """

    def __init__(self, cfg: AgentConfig, robot: RobotPort, video: VideoPort | None, emit: Emit,
                 link: Callable[[], Any], counters: Counter[str], *,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[object]] | None = None) -> None:
        self.cfg = cfg
        self._clock = clock
        self._sleep, self._pace = sleep or beat.sleep, sleep or asyncio.sleep
        #: the telem polls follow the control loop's rest (agent.support.beat.RestPolls)
        self._rest = beat.RestPolls(robot, sleep)
        self._robot = robot
        self._video = ArtexVideo(video, cfg.video, counters, clock) if video is not None and video.camera_ids else None
        self._emit = emit
        self._link = link
        self._delivery = VideoDelivery(counters, clock)
        self._counters = counters
        self._telem: asyncio.Task | None = None
        self._frames: asyncio.Task | None = None

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

    def new_link(self) -> None:
        """A new connection: video pacing (ack or not, ladder levels, throughput) is learnt again."""
        self._delivery.new_link()
        if self._video is not None:
            self._video.new_link()

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
        gate, build, rest, clock = TelemGate(), TelemBuilder().telemetry, self._rest, self._clock
        last = -float("inf")
        poll = start = clock()
        snap: Snapshot | None = None
        data: dict[str, Any] = {}
        looked = False      # the gate saw the last poll's dict (not a keepalive's): its quiet_polls hold
        while True:
            # one poll per period on a schedule (the pause ends on the shared wake-up grid: the
            # average rate is the period's whatever the grid); a late poll skips ahead, never bursts
            period = self.period_s
            poll += period
            skipped = 0
            if looked:      # the loop rests: no poll before its next tick, a keepalive's or a settled value's
                quiet = gate.quiet_polls()
                limit = last + self.cfg.artex.telem_keepalive_s - 1e-6
                start, (poll, skipped) = poll, rest.skip_to(
                    poll, period, snap, limit if quiet is None else min(limit, poll + quiet * period))
            wait = poll - clock()
            if wait <= 0:
                poll = clock()
                await asyncio.sleep(0)      # behind: the loop's other work first, never a spin
            elif skipped or rest.rests(snap, wait):     # at rest (polls skipped, or the schedule's own next)
                if await rest.wait(wait):       # roused: a tick woken at rest published its snapshot
                    poll = clock()
                    skipped = min(skipped, max(0, math.floor((poll - start) / period - 1e-9) + 1))
            else:
                await self._sleep(wait)
            gate.skip(skipped)              # the polls skipped would each have read the last snapshot
            rest.note()
            new = self._robot.snapshot()
            if new is not snap:
                snap, data = new, build(new)
            keepalive = clock() - last >= self.cfg.artex.telem_keepalive_s - 1e-6
            due = keepalive or gate.due(data)
            looked = not keepalive
            if due and await self._emit("telem", {"payload": data}):
                gate.mark_sent(data)
                last = clock()

    def video_stats(self) -> dict[str, Any]:
        """Video delivery figures for ``status()`` (not sent in ``telem``: a hub UI built for the SDK
        shows every telem key as a sensor): per camera ``{age_p50_s, age_p95_s, level, kBps}`` and
        ``reencoded``, ``oversize_skipped``, ``too_old``, ``acks`` (this connection's hub acknowledges
        ``video``: True / False / None not yet known); ``{}`` without video."""
        if self._video is None:
            return {}
        return {**self._video.telem(), "acks": self._delivery.acks}

    async def _video_loop(self) -> None:
        assert self._video is not None
        last = -float("inf")
        while True:
            period = self.period_s
            wait = last + period - self._clock()
            if wait > 0:
                await self._pace(wait)
            payload = await self._video.next_payload(self.cfg.artex.jpeg_quality, period)
            if not payload:
                continue
            last = self._clock()
            took = await self._delivery.send(self._link(), payload)
            if took is not None:
                self._video.drained(payload, took, period)

    def warn_off(self, where: str) -> None:
        """Say at start which stream ``where`` (params.json's path) keeps off, with how to turn it on: a
        robot whose hub UI shows no telemetry or video must not look dead without a word in its log."""
        off = [("telem_can", "telemetry")] if not self.cfg.telem_can else []
        if not self.cfg.video_can and self.has_video:
            off.append(("video_can", "video"))
        for key, what in off:
            log.warning("ARTEX: %s is off: %s sets %s false (the passport says so and no %s is sent); to turn "
                        "it on set \"%s\": true there and restart, or send web_settings {\"%s\": true} "
                        "(lasts until restart)", what, where, key, what, key, key)


def _report(task: asyncio.Task) -> None:
    """A stream that ended by itself is a bug: log it (cancellation is the normal end)."""
    if not task.cancelled() and task.exception() is not None:
        log.error("ARTEX: %s stream failed", task.get_name(), exc_info=task.exception())
