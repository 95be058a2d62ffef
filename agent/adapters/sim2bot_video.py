"""Sim2Bot camera side: subscriptions from the control socket, frames to ``/video``.

A ``camera_subscribe`` starts (or renews) one stream per (camera, format, fps);
a stream not renewed within the TTL (~3 s, protocol v1) stops, so a crashed
controller stops the feed. Each stream awaits the next frame encoded by the
shared :class:`agent.video.VideoHub` (one encode per frame and format, however
many streams want it), paces it to the requested fps and sends it as one
binary message (:func:`frame_prefix` then the image, never joined: on a
``websockets`` connection as masked fragments, :mod:`agent.video.wsframes`).
A slow socket makes the stream skip to the newest frame: nothing queues. Each
``/video`` link learns what its path carries (:class:`agent.video.LinkRate`, from how long
frames take to drain): frames are spaced to that rate and re-encoded smaller to fit it
(quality, then size: the stream's :class:`agent.video.LinkPacer` level), so neither the
newest frame nor the control socket sharing the path waits behind old frames. The
link's :class:`agent.video.SendBudget` (bytes/s, CPU share of encode + pack +
send) drops a stream's frame that would go over it: the delivered fps falls,
the control loop never waits.

There is one :class:`VideoStreams` per bridge room the adapter serves
(:mod:`agent.adapters.sim2bot_room`): a room's streams go only to that room's
``/video`` socket, and the bridge relays them only to that room's controllers.

Source: Sim2Bot bridge protocol v1 (``protocol.md``, sim2bot-python, sim2bot 0.1.0; docs/sim2bot.md) ("Cameras", "Camera frames");
reference reader ``sim2bot.client._parse_frame``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from websockets.exceptions import WebSocketException

from agent.adapters.sim2bot_commands import (
    CODEC_H264,
    CODEC_JPEG,
    CODEC_RAW,
    FPS_RANGE,
    CameraRequest,
)
from agent.compat import websockets as ws_compat
from agent.config.drivers import CameraConfig
from agent.errors import CommandDeclined
from agent.support import beat
from agent.video import EncodedFrame, FrameFormat, LinkPacer, LinkRate, SendBudget
from agent.video.budget import fit_to_link
from agent.video.links import transport_backlog, wait_drained
from agent.video.wsframes import FragmentWriter

log = logging.getLogger(__name__)

#: u8 version, u8 codec, u16 flags, u32 sequence, f64 capture ts (Unix s), u16 width, u16 height.
HEADER = struct.Struct("<BBHIdHH")
FRAMING_VERSION = 1
FLAG_KEYFRAME = 0x0001
#: How long a stream waits for a frame before re-checking its TTL, s.
_WAIT_S = 0.5
#: A frame's drain is looked at after 2 ms, then when the rest should be gone at the rate seen, at most
#: this far apart, s (a slow link's 40 ms drain: a few looks, not 20; agent.video.links.wait_drained)
_DRAIN_POLL_MAX_S = 0.016
#: Most streams (distinct formats) of one camera at a time. Each costs an encode per frame and,
#: raw at 1920x1080, 8 MB in flight: without a bound, a few hundred subscriptions with distinct
#: sizes took gigabytes and stalled the event loop for seconds.
MAX_STREAMS_PER_CAMERA = 4
#: After ``camera_unsubscribe``, a stream of that camera lasts this long unless renewed, s
#: (longer than the reference client's 1 s renewal, shorter than the 3 s TTL).
UNSUBSCRIBE_GRACE_S = 1.5

Sender = Callable[[bytes], Awaitable[None]]


def frame_prefix(camera_id: str, codec: int, seq: int, t_unix_s: float, width: int, height: int,
                 keyframe: bool = True) -> bytes:
    """What goes before the image in a ``/video`` message: 20-byte little-endian header, id length, id.

    Args:
        camera_id: global camera id, at most 255 UTF-8 bytes.
        codec: 0 JPEG, 1 H.264, 2 raw RGBA (rows bottom-up).
        seq: frame sequence number (wrapped to 32 bits).
        t_unix_s: capture time, Unix s. width, height: pixels (<= 65535).

    Raises:
        ValueError: camera id longer than 255 bytes, size out of range.
    """
    id_field = _id_field(camera_id)
    return HEADER.pack(FRAMING_VERSION, codec, FLAG_KEYFRAME if keyframe else 0,
                       seq & 0xFFFFFFFF, t_unix_s, width, height) + id_field


@functools.lru_cache(maxsize=64)
def _id_field(camera_id: str) -> bytes:
    """The id part of :func:`frame_prefix`: length byte and UTF-8 id (built once per camera, not per frame)."""
    cid = camera_id.encode("utf-8")
    if len(cid) > 255:
        raise ValueError(f"camera id {camera_id!r} is longer than 255 bytes")
    return bytes((len(cid),)) + cid


def pack_frame(camera_id: str, codec: int, seq: int, t_unix_s: float, width: int, height: int,
               image: bytes | memoryview, keyframe: bool = True) -> bytes:
    """One binary ``/video`` message in one buffer: :func:`frame_prefix` then ``image`` (the encoded
    image). The streams send the two parts as one fragmented message instead (no 8 MB copy).

    Raises:
        ValueError: camera id longer than 255 bytes, size out of range.
    """
    return b"".join((frame_prefix(camera_id, codec, seq, t_unix_s, width, height, keyframe), image))


@dataclass(frozen=True, slots=True)
class StreamKey:
    """What makes two subscriptions the same stream."""

    camera: str
    codec: int
    width: int
    height: int
    quality: int
    fps: float


def resolve(req: CameraRequest, cam: CameraConfig) -> StreamKey:
    """Fill a request's omitted fields from the camera's config; H.264 becomes JPEG."""
    codec = CODEC_JPEG if req.codec in (None, CODEC_H264) else req.codec
    fps = req.fps if req.fps is not None else max(FPS_RANGE[0], min(FPS_RANGE[1], cam.fps))
    quality = 0 if codec == CODEC_RAW else (req.quality if req.quality is not None else cam.jpeg_quality)
    return StreamKey(camera=req.camera, codec=codec, width=req.width or cam.width,
                     height=req.height or cam.height, quality=quality, fps=fps)


def hub_format(key: StreamKey) -> FrameFormat:
    """The hub's encode request for a stream (the hub's ``rgba`` rows are bottom-up, as WebGL gives)."""
    codec = "jpeg" if key.codec == CODEC_JPEG else "rgba"
    return FrameFormat(codec, key.width, key.height, key.quality or 80)


class VideoStreams:
    """The camera subscriptions of one adapter and their sending tasks.

    Args:
        hub: the shared VideoHub (``next_encoded``).
        cameras: global id -> (hub camera id, camera config), in announce order.
        ttl_s: a stream not renewed for this long stops, s.
        clock: monotonic clock, s (injected in tests).
        max_age_s: a frame older than this (capture -> handed to the socket) is not sent, s.
        budget: what the ``/video`` link may spend on frames (bytes/s, CPU share of encode + pack +
            send); a stream's frame that would go over it is dropped (its delivered fps falls).
            None: no limit.
    """

    def __init__(self, hub, cameras: dict[str, tuple[str, CameraConfig]], ttl_s: float,
                 clock: Callable[[], float] = time.monotonic, max_age_s: float = 0.5,
                 budget: SendBudget | None = None) -> None:
        self._hub = hub
        self._cameras = cameras
        self._ttl_s = ttl_s
        self._clock = clock
        self._send: Sender | None = None
        self._writer: FragmentWriter | None = None
        self.budget = budget or SendBudget(clock=clock)
        self._expiry: dict[StreamKey, float] = {}
        self._tasks: dict[StreamKey, asyncio.Task] = {}
        self._h264_warned = False
        self.frames_sent = 0
        self.bytes_sent = 0
        self.send_errors = 0
        self.too_old = 0
        self._max_age_s = max_age_s
        self.pacers: dict[StreamKey, LinkPacer] = {}
        self.rate = LinkRate(clock=clock)
        self.too_big = 0
        self._in_flight: dict[str, asyncio.Lock] = {}
        self._ending: set[StreamKey] = set()

    # ------------------------------------------------------------------ wiring
    def attach(self, send: Sender | None) -> None:
        """Set (or clear, with None) the coroutine that sends one binary message on ``/video``.

        The bound ``send`` of a ``websockets`` connection is not called: frames go out through a
        :class:`agent.video.wsframes.FragmentWriter` on that connection (no 8 MB copies or masking
        under the GIL on the event loop); any other coroutine gets each message as one ``bytes``."""
        self._send = send
        conn = getattr(send, "__self__", None)
        self._writer = FragmentWriter(conn) if ws_compat.is_connection(conn) else None

    @property
    def attached(self) -> bool:
        """A ``/video`` socket is connected."""
        return self._send is not None

    @property
    def active(self) -> tuple[StreamKey, ...]:
        """Streams currently subscribed."""
        return tuple(self._tasks)

    def formats(self, camera: str) -> set[StreamKey]:
        """The streams of ``camera`` running and not ending after an unsubscribe: what counts
        against :data:`MAX_STREAMS_PER_CAMERA`."""
        return {k for k, t in self._tasks.items() if k.camera == camera and not t.done() and k not in self._ending}

    # ------------------------------------------------------------------ requests
    def subscribe(self, req: CameraRequest, elsewhere: set[StreamKey] | frozenset = frozenset()) -> StreamKey:
        """Start or renew the stream ``req`` asks for; must run on the event loop.

        ``elsewhere``: formats of this camera that other rooms' streams run (:meth:`formats`); they
        count against the limit too (one encode each), a format among them costs nothing more.

        Raises:
            CommandDeclined: a new format for a camera that already has
                ``MAX_STREAMS_PER_CAMERA`` streams (renewing one of them is always accepted);
                nothing changes then.
        """
        hub_id, cam = self._cameras[req.camera]
        key = resolve(req, cam)
        task = self._tasks.get(key)
        if (task is None or task.done()) and key not in elsewhere:
            others = (self.formats(key.camera) | elsewhere) - {key}
            if len(others) >= MAX_STREAMS_PER_CAMERA:
                # one text for every refused format: the adapter's identical warnings are rate-limited
                raise CommandDeclined(
                    f"camera {key.camera} already streams {len(others)} formats (at most "
                    f"{MAX_STREAMS_PER_CAMERA}); another format is refused until one is unsubscribed "
                    f"or expires ({self._ttl_s:g} s without renewal)")
        if req.codec == CODEC_H264 and not self._h264_warned:
            self._h264_warned = True
            log.warning("sim2bot: camera %s asked for H.264; the agent sends JPEG instead", req.camera)
        self._expiry[key] = self._clock() + self._ttl_s
        self._ending.discard(key)
        if task is None or task.done():
            log.info("sim2bot: streaming %s (%s) codec %d %dx%d q%d at %.1f fps", key.camera, hub_id,
                     key.codec, key.width, key.height, key.quality, key.fps)
            self._tasks[key] = asyncio.get_running_loop().create_task(
                self._stream(key, hub_id), name=f"sim2bot-video-{key.camera}")
        return key

    def unsubscribe(self, camera: str) -> int:
        """A controller unsubscribed ``camera``: its streams end :data:`UNSUBSCRIBE_GRACE_S` s from now
        unless renewed meanwhile. The protocol does not say which controller nor which format: the
        streams another controller still renews (every second, ``sim2bot.Robot``) go on without a gap.
        Returns how many streams will end."""
        keys = [k for k in self._tasks if k.camera == camera]
        end = self._clock() + UNSUBSCRIBE_GRACE_S
        for key in keys:
            self._expiry[key] = min(self._expiry.get(key, end), end)
            self._ending.add(key)   # not counted against MAX_STREAMS_PER_CAMERA meanwhile
        return len(keys)

    def close(self) -> None:
        """Stop every stream (session over)."""
        for key in list(self._tasks):
            self._stop(key, "session closed")

    def _stop(self, key: StreamKey, why: str) -> None:
        self._expiry.pop(key, None)
        self.pacers.pop(key, None)
        self._ending.discard(key)
        task = self._tasks.pop(key, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        log.info("sim2bot: stopped streaming %s (%s)", key.camera, why)

    # ------------------------------------------------------------------ sending
    async def _stream(self, key: StreamKey, hub_id: str) -> None:
        fmt = hub_format(key)
        period = 1.0 / key.fps
        pacer = self.pacers[key] = LinkPacer(self._max_age_s, period, self._clock)
        after_seq, due, cost = -1, self._clock(), (0, 0.0)
        while True:
            now = self._clock()
            if now >= self._expiry.get(key, 0.0):
                why = (f"unsubscribed, not renewed within {UNSUBSCRIBE_GRACE_S:g} s" if key in self._ending
                       else f"not renewed for {self._ttl_s:g} s")
                self._stop(key, why)
                return
            if due > now:       # ends on the event loop's shared wake-up grid (the fps kept on average)
                await beat.sleep(due - now)
            if self._send is not None and not self.budget.admit(*cost):
                pacer.dropped += 1                 # over the link's budget: this period's frame is dropped
                due = max(due + period, self._clock())
                continue
            # the camera's previous frame on this link is written first, then the newest frame is taken:
            # a frame never ages waiting for another one to drain
            async with self._in_flight.get(key.camera) or self._in_flight.setdefault(key.camera, asyncio.Lock()):
                frame = await self._next(hub_id, fmt, after_seq, pacer)
                if frame is None:
                    continue
                after_seq = frame.seq
                due = max(due + period, self._clock())
                sent = await self._send_one(key, pacer, frame)
                cost = sent or cost
                if sent is not None:    # the link's share of this frame: the next one waits for it
                    due = max(due, self._clock() + self.rate.spacing_s(sent[0]))

    async def _next(self, hub_id: str, fmt: FrameFormat, after_seq: int, pacer: LinkPacer) -> EncodedFrame | None:
        """The newest frame after ``after_seq`` in ``fmt``, or smaller (lower quality, then size: the
        pacer's ladder level) to fit what the link carries (:class:`agent.video.LinkRate`;
        :func:`agent.video.budget.fit_to_link`); None on timeout or an encoder failure. When even the
        smallest does not fit (counted in ``too_big``) the smallest is sent: the rate spaces it out."""
        frame = await self._hub.next_frame(hub_id, after_seq, _WAIT_S)
        if frame is None:
            return None
        out, too_big = await fit_to_link(self._hub, frame, fmt, self.rate, pacer)
        if too_big:         # not even the smallest fits: it goes anyway, spaced to the rate (fewer frames)
            self.too_big += 1
        return out

    async def _send_one(self, key: StreamKey, pacer: LinkPacer, frame: EncodedFrame) -> tuple[int, float] | None:
        """Send ``frame`` unless too old, then wait until the socket wrote it (one frame in flight).
        Returns what it cost (wire bytes, CPU s of encode + pack + send), None when not sent."""
        send, writer = self._send, self._writer
        if send is None:
            return None
        if not pacer.fresh(frame.t_mono_s):
            self.too_old += 1
            return None
        parts = (frame_prefix(key.camera, key.codec, frame.seq, frame.t_unix_s, frame.width, frame.height),
                 frame.data)
        start, cpu0 = self._clock(), time.thread_time()
        try:
            if writer is not None:
                nbytes, cpu = await writer.send(parts)
            else:
                await send(b"".join(parts))
                nbytes, cpu = len(parts[0]) + len(frame.data), time.thread_time() - cpu0
        except (WebSocketException, OSError) as err:  # the video task reconnects the socket
            self.send_errors += 1
            log.debug("sim2bot: frame send on /video failed: %s", err)
            return None
        self.budget.spend(nbytes, cpu + frame.encode_s)
        pacer.handed(frame.t_mono_s, start)
        self.frames_sent += 1
        self.bytes_sent += nbytes
        transport = ws_compat.transport(getattr(send, "__self__", None))
        await wait_drained(lambda: transport_backlog(transport), _WAIT_S, clock=self._clock, max_poll_s=_DRAIN_POLL_MAX_S)
        pacer.drained(nbytes, self._clock() - start)
        self.rate.drained(nbytes, self._clock() - start)
        return nbytes, cpu + frame.encode_s

    def stats(self) -> dict[str, object]:
        """Per stream (``camera codec WxH@fps``): frame age p50/p95/p99/max (capture -> handed to the
        socket, s), throughput (kB/s), ``sent``, ``dropped`` (over the link's budget) and ``too_old``;
        plus the link's ``too_old`` (frames not sent: older than the limit), ``dropped``, ``too_big``
        (not even the smallest re-encode fits the link's rate: the smallest went, spaced out),
        ``link_Bps`` (the rate learned, bytes/s; None: unlimited), ``rate_cuts``,
        ``budget_bytes_per_s`` and ``budget_cpu_share`` (what the link spent over the last second,
        CPU as a share of one core). Only streams are dicts."""
        usage = self.budget.usage()
        out: dict[str, object] = {"too_old": self.too_old, "dropped": self.budget.dropped, "too_big": self.too_big,
                                  "link_Bps": None if self.rate.bps is None else round(self.rate.bps),
                                  "rate_cuts": self.rate.cuts,
                                  "budget_bytes_per_s": usage["bytes_per_s"], "budget_cpu_share": usage["cpu_share"]}
        for key, pacer in self.pacers.items():
            name = f"{key.camera} {key.codec} {key.width}x{key.height}@{key.fps:g}"
            out[name] = {**pacer.age_stats(), "kBps": round(pacer.throughput_bps / 1000), "sent": pacer.sent,
                         "dropped": pacer.dropped, "too_old": pacer.too_old}
        return out
