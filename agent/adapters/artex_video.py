"""ARTEX ``video`` under a budget: frame choice (:class:`ArtexVideo`) and delivery (:class:`VideoDelivery`).

Budgets (``video`` config section, docs/artex.md "Video budget"):

- size: a ``video`` message never exceeds ``max_message_bytes`` on the wire; each camera
  gets its share, a bigger frame is re-encoded at a lower quality, then smaller
  (:func:`agent.video.fit_ladder`), else skipped, counted and logged once;
- age: a frame older than ``max_frame_age_s`` when it would be handed to the socket
  is not sent (``video_too_old``);
- one in flight: the next message waits until the last one was delivered: the hub's
  Socket.IO acknowledgement (python-socketio servers acknowledge every handled event
  when asked), or, for a hub that does not acknowledge, until Engine.IO, the transport
  and the kernel wrote it (:func:`link_backlog`). Whether the hub acknowledges is learnt
  per connection: the first message waits for the local drain, then at most
  :data:`ACK_GRACE_S` for the ack, so a non-acking hub never costs a 5 s ack timeout;
- adaptation: a delivery slower than the period moves the camera one step down the
  re-encode ladder, ten quick ones in a row one step back up.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from socketio.exceptions import SocketIOError

from agent.compat import aiohttp as aiohttp_compat
from agent.compat import engineio as eio_compat
from agent.config.video import VideoConfig
from agent.ports import VideoPort
from agent.video import FrameFormat, LinkPacer
from agent.video.links import shrink_send_buffer, transport_backlog, wait_drained

log = logging.getLogger("agent.adapters.artex")

__all__ = ["ArtexVideo", "VideoDelivery", "is_raw_key", "link_backlog", "link_transport"]

NAMESPACE = "/robot"
#: Bytes of a ``video`` message besides the frames (event name, namespace, placeholders, keys).
PAYLOAD_OVERHEAD = 512
#: Longest wait for one delivery (ack or local drain) before it is counted as late, s.
DELIVERY_WAIT_S = 5.0
#: The local drain of a video message (a hub that does not ack) is looked at after 2 ms, then when the rest
#: should be gone at the rate seen, at most this far apart, s (agent.video.links.wait_drained)
DRAIN_POLL_MAX_S = 0.016
#: After the local send queue drained, how long an ack may still take before this connection's hub
#: is taken for one that never acknowledges (a Node socket.io handler without a callback), s.
ACK_GRACE_S = 0.5

RAW_MARKERS = ("led", "rgb_strip")
#: A camera's last frame is repeated in messages without a new one of it while younger than this, s
#: (a camera that stopped delivering drops out of the messages instead of showing a frozen image).
REPEAT_MAX_AGE_S = 5.0


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
    return eio_compat.queued_packets(eio) + transport_backlog(link_transport(client))


def link_transport(client: Any) -> Any:
    """The websocket transport of a Socket.IO ``client``, or None."""
    return aiohttp_compat.websocket_transport(eio_compat.websocket(getattr(client, "eio", None)))


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
        #: camera -> (bytes, capture t_mono_s) of the last frame sent, repeated in messages without a new one
        self._last: dict[str, tuple[bytes, float]] = {}
        self.pacers = {cam: LinkPacer(budget.max_frame_age_s, 0.05, clock) for cam in hub.camera_ids}
        self._oversize_logged: set[str] = set()
        self._formats: dict[int, FrameFormat] = {}      # quality -> the format asked (one object, not one a message)

    @property
    def camera_ids(self) -> tuple[str, ...]:
        """Cameras streamed, in config order."""
        return tuple(self._hub.camera_ids)

    def _oversize(self, camera_id: str, what: str, limit: int) -> None:
        self._counters["video_oversize_skipped"] += 1
        if camera_id not in self._oversize_logged:
            self._oversize_logged.add(camera_id)
            log.warning("ARTEX: camera %s: %s does not fit its %d-byte share of the message budget "
                        "(video.max_message_bytes); skipped (counted in video_oversize_skipped, logged once)",
                        camera_id, what, limit)

    async def _encode(self, camera_id: str, frame: Any, quality: int, limit: int) -> tuple[str, Any]:
        """``(camera_id, (bytes, t_mono_s))`` of one new frame within ``limit`` bytes, or ``(camera_id, None)``."""
        pacer = self.pacers[camera_id]
        if is_raw_key(camera_id):
            if frame.image.nbytes > limit:     # checked before the copy: no 6 MB tobytes() just to skip it
                self._oversize(camera_id, f"a raw frame of {frame.image.nbytes} bytes", limit)
                return camera_id, None
            return camera_id, (frame.image.tobytes(), frame.t_mono_s)
        fmt = self._formats.get(quality)
        if fmt is None:
            fmt = self._formats[quality] = FrameFormat("jpeg", quality=quality)
        out, level = await self._hub.encoded_within(frame, fmt, limit, pacer.level)
        if out is None:
            self._oversize(camera_id, f"a {frame.width}x{frame.height} frame even at the smallest re-encode", limit)
            return camera_id, None
        if level > 0:
            self._counters["video_reencoded"] += 1
        pacer.level = level
        return camera_id, (out.data, out.t_mono_s)

    async def _new_frames(self, cams: tuple[str, ...], wait_s: float) -> dict[str, Any]:
        """The cameras' frames newer than the last ones taken: waits up to ``wait_s`` s for the first
        camera with one, then takes what the others have at that moment (no wait for a slow camera).
        One camera is simply awaited (no task and no ``asyncio.wait`` per message)."""
        if len(cams) == 1:
            cam = cams[0]
            frame = await self._hub.next_frame(cam, self._after.get(cam, 0), wait_s)
            if frame is None:
                return {}
            self._after[cam] = frame.seq
            return {cam: frame}
        waits = {cam: asyncio.ensure_future(self._hub.next_frame(cam, self._after.get(cam, 0), wait_s))
                 for cam in cams}
        pending: set[asyncio.Future] = set(waits.values())
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if any(t.result() is not None for t in done):
                break
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        out: dict[str, Any] = {}
        for cam, task in waits.items():
            frame = None if task in pending else task.result()
            if task in pending:
                frame = await self._hub.next_frame(cam, self._after.get(cam, 0), 0.0)
            if frame is not None:
                self._after[cam] = frame.seq
                out[cam] = frame
        return out

    async def next_payload(self, quality: int, wait_s: float) -> dict[str, bytes]:
        """Every camera's latest frame, once at least one camera has a new one (waiting up to ``wait_s`` s).

        As the SDK's vault sends its whole ``{camera: frame}`` dict each time, a message carries every
        camera: the new frames, and for the others the last frame sent (the same bytes again, counted
        in ``video_repeated``) while it is younger than :data:`REPEAT_MAX_AGE_S`. Each frame fits its
        share of ``max_message_bytes`` (re-encoded smaller or skipped); a new frame older than
        ``max_frame_age_s`` by now is left out (``video_too_old``).

        Returns:
            camera id -> JPEG (or raw) bytes in config order; empty when no camera had a new, fresh frame.
        """
        cams = self.camera_ids
        limit = (self._budget.max_message_bytes - PAYLOAD_OVERHEAD) // max(1, len(cams)) - 64
        frames = await self._new_frames(cams, wait_s)
        if len(frames) == 1:        # no task of gather's for one frame
            got = [await self._encode(*next(iter(frames.items())), quality, limit)]
        else:
            got = await asyncio.gather(*(self._encode(cam, frame, quality, limit) for cam, frame in frames.items()))
        payload: dict[str, bytes] = {}
        for cam, item in got:
            if item is None:
                continue
            if not self.pacers[cam].fresh(item[1]):
                self._counters["video_too_old"] += 1
                continue
            payload[cam] = item[0]
            self._last[cam] = item
            self.pacers[cam].handed(item[1])
        if not payload:
            return {}
        now = self._clock()
        for cam in cams:
            last = self._last.get(cam)
            if cam not in payload and last is not None and len(last[0]) <= limit and now - last[1] <= REPEAT_MAX_AGE_S:
                payload[cam] = last[0]
                self._counters["video_repeated"] += 1
        return {cam: payload[cam] for cam in cams if cam in payload}

    def new_link(self) -> None:
        """A new connection: what was learnt about the last link (ladder levels, throughput) is forgotten."""
        self.pacers = {cam: LinkPacer(self._budget.max_frame_age_s, 0.05, self._clock) for cam in self.camera_ids}
        self._last.clear()

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
        for key in ("video_reencoded", "video_oversize_skipped", "video_too_old", "video_repeated"):
            out[key.removeprefix("video_")] = self._counters[key]
        return out


def _round(value: float | None) -> float | None:
    """Ages to 0.05 s: the telem deadband would otherwise see a change on every poll."""
    return None if value is None else round(value * 20) / 20


class VideoDelivery:
    """Sends one ``video`` message at a time and times its delivery.

    Args:
        counters: the adapter's counters (``sent_video``, ``video_late``).
        clock: monotonic clock, s.
    """

    def __init__(self, counters: Counter[str], clock: Callable[[], float] = time.monotonic) -> None:
        self._counters = counters
        self._clock = clock
        #: None until known; False when this connection's hub does not acknowledge (the local drain paces).
        self.acks: bool | None = None
        self._shrunk: Any = None        # the transport whose send buffer was shrunk

    def new_link(self) -> None:
        """A new connection: whether its hub acknowledges ``video`` is learnt again."""
        self.acks = None

    async def send(self, client: Any, payload: dict[str, bytes]) -> float | None:
        """Emit ``payload`` on ``client`` and wait for its delivery.

        Returns:
            Seconds from emit to delivery, or None when it was not sent (no link, emit failed).
        """
        if client is None or not getattr(client, "connected", False):
            return None
        loop = asyncio.get_running_loop()
        acked: asyncio.Future = loop.create_future()
        def on_ack(*_: object) -> None:
            if not acked.done():
                acked.set_result(True)

        callback = None if self.acks is False else on_ack
        start = self._clock()
        try:
            await client.emit("video", {"payload": payload}, namespace=NAMESPACE, callback=callback)
        except (SocketIOError, OSError) as err:
            log.debug("ARTEX: emit video failed: %s", err)
            return None
        self._counters["sent_video"] += 1
        transport = link_transport(client)
        if transport is not self._shrunk:       # once per connection, not a getsockopt per message
            shrink_send_buffer(transport)
            self._shrunk = transport
        if self.acks is True:
            if await self._acked(acked, DELIVERY_WAIT_S):
                return self._clock() - start
            self._counters["video_late"] += 1
            return self._clock() - start
        # no ack known (yet) on this connection: the local drain times the delivery, never an ack timeout
        drained = await wait_drained(lambda: link_backlog(client) if not acked.done() else 0, DELIVERY_WAIT_S,
                                     clock=self._clock, max_poll_s=DRAIN_POLL_MAX_S)
        took = self._clock() - start
        if self.acks is None:
            if await self._acked(acked, ACK_GRACE_S):
                self.acks = True
                return self._clock() - start
            self.acks = False
            log.info("ARTEX: the hub does not acknowledge video on this connection; pacing by the local send queue")
        if not drained:
            self._counters["video_late"] += 1
        return took

    @staticmethod
    async def _acked(acked: asyncio.Future, wait_s: float) -> bool:
        """Wait up to ``wait_s`` for the ack: its timeout resolves ``acked`` with False (one timer, no
        shield or ``asyncio.timeout``: a late ack finds it done and changes nothing)."""
        if not acked.done():
            expire = asyncio.get_running_loop().call_later(wait_s, _give_up, acked)
            try:
                await acked
            finally:
                expire.cancel()
        return acked.result() is True


def _give_up(acked: asyncio.Future) -> None:
    if not acked.done():
        acked.set_result(False)
