"""Video hub: capture once per camera, encode once per (camera, frame, output), fan out the latest frame.

Threads (docs/architecture.md): the hub's :class:`agent.video.capture.Capture` runs one
capture thread per configured camera, which keeps only the newest :class:`Frame`, and one
supervisor thread that notices reads or opens that hang; a small encoder pool turns frames
into JPEG or raw RGBA. The asyncio side only awaits: :meth:`VideoHub.next_encoded` waits (on
the caller's loop, woken with ``loop.call_soon_threadsafe``) for a frame newer
than the one the consumer has, then awaits its encoding, shared by every
consumer asking for the same frame and output (the :class:`FrameFormat` resolved against the
frame's size, :meth:`FrameFormat.resolved`: ``quality=80`` and ``640, 480, 80`` are one encode of a
640x480 frame). A slow consumer
simply gets the newest frame on its next call: there is no queue. An output asked for (nearly)
every frame is encoded ahead, on the capture thread before the frame is handed out
(each of the last :data:`AHEAD_WINDOW` frames): its consumers find the encode
done, with no encoder thread and no wake-up of their loop in between.

Budgets (agent.video.budget): the encoders keep within a share of one core (a
consumer waits, frames captured meanwhile are dropped); the encode cache is
bounded in entries and bytes and emptied when nobody watches;
:meth:`VideoHub.encoded_within` fits a frame under a byte limit.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import random
import threading
import time
import weakref
from collections.abc import Callable, Sequence

import cv2

from agent.config import AgentConfig
from agent.config.drivers import CameraConfig
from agent.errors import CommandDeclined, CommandError, CommandRejected, ConfigError
from agent.model import DeviceHealth
from agent.support.threadprio import background_thread
from agent.video.budget import CpuBudget, fit_ladder
from agent.video.capture import Capture, Feed, resolve_all, wake_waiters
from agent.video.frames import EncodedFrame, Frame, FrameFormat, encode, resolved_format
from drivers.camera import Camera

log = logging.getLogger("agent.video")

#: Encodings kept per camera (a few recent frames x formats); older ones are dropped.
MAX_CACHED_ENCODES = 32
#: Encoded bytes kept per camera by default (4 raw full-HD frames would be 33 MB).
CACHE_MAX_BYTES = 64 * 1024 * 1024
#: An output asked for each of a camera's last ``AHEAD_WINDOW`` frames is encoded ahead: on the
#: capture thread, before the next frame is handed out. A consumer slower than the camera (two
#: frames in three, one in two) never has it: no frame is encoded that nobody takes, but the one
#: after a run of ``AHEAD_WINDOW`` taken frames when the consumer skips it.
AHEAD_WINDOW = 3
#: Encoding ahead takes at most this share of the camera's frame period (``1 / fps``) on the capture
#: thread, judged by each output's last encode: a capture thread busy encoding would read late
#: frames out of the driver's buffers (a 1080p encode on a Pi goes to the encoder threads).
AHEAD_SHARE = 0.5


class VideoHub:
    """Latest-frame capture, shared encoding and health for every configured camera.

    Args:
        cameras: camera config sections (ids unique).
        camera_factory: ``cfg -> Camera`` (not opened); called for every (re)open.
        encode_workers: encoder threads (``cv2.imencode`` releases the GIL).
        reopen_delay_s, reopen_delay_max_s: first and largest reopen backoff, s (jittered 50..100 %).
        max_stuck_threads: capture threads left blocked in a driver call, per camera, before
            the hub stops starting new ones until one returns.
        probe_period_s: None: capture always. A number: capture only while someone watches
            (a frame was asked for within ``idle_after_s``), else one frame every
            ``probe_period_s`` s as a health probe; encodes are dropped when nobody watches.
        idle_after_s: how long one request counts as someone watching, s.
        cache_max_bytes: encoded bytes kept per camera (the oldest encodes go first).
        encode_cpu_share: share of one core the encoders may use (1.0: no limit).
        clock: monotonic clock, s. wall_clock: Unix clock, s. rng: jitter source.

    Raises:
        ConfigError: two cameras with the same id.
    """

    def __init__(self, cameras: Sequence[CameraConfig], *,
                 camera_factory: Callable[[CameraConfig], Camera] = Camera, encode_workers: int = 2,
                 reopen_delay_s: float = 0.2, reopen_delay_max_s: float = 5.0, max_stuck_threads: int = 2,
                 probe_period_s: float | None = None, idle_after_s: float = 3.0,
                 cache_max_bytes: int = CACHE_MAX_BYTES, encode_cpu_share: float = 1.0,
                 clock: Callable[[], float] = time.monotonic, wall_clock: Callable[[], float] = time.time,
                 rng: random.Random | None = None) -> None:
        ids = [c.id for c in cameras]
        if len(ids) != len(set(ids)):
            raise ConfigError(f"camera ids used twice: {ids}", [("$.drivers.cameras", "camera ids used twice")])
        self.capture = Capture(cameras, camera_factory=camera_factory, reopen_delay_s=reopen_delay_s,
                               reopen_delay_max_s=reopen_delay_max_s, max_stuck_threads=max_stuck_threads,
                               probe_period_s=probe_period_s, idle_after_s=idle_after_s, clock=clock,
                               wall_clock=wall_clock, rng=rng)
        self._feeds = self.capture.feeds
        self._encode_workers = max(1, encode_workers)
        self._clock = clock
        self._cache_max_bytes = cache_max_bytes
        self.cpu = CpuBudget(encode_cpu_share, clock=clock)
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._stats_lock = threading.Lock()
        self._wrapped: weakref.WeakKeyDictionary[concurrent.futures.Future, dict] = weakref.WeakKeyDictionary()
        self._encode_count = 0
        self._encode_s = 0.0
        self._ahead = 0
        self.capture.before_publish = self._encode_ahead
        self._started = False
        self._closed = False

    # ------------------------------------------------------------------ public API

    @property
    def camera_ids(self) -> tuple[str, ...]:
        """Configured camera ids, in config order."""
        return tuple(self._feeds)

    @property
    def encode_count(self) -> int:
        """Encodes performed since start, all cameras and formats (one per frame, format)."""
        return self._encode_count

    def stats(self) -> dict[str, float | int]:
        """``encodes``, ``encode_s`` (s spent encoding), ``encode_share`` (of one core, last second),
        ``cpu_waits`` (times a consumer waited for the CPU budget), ``cache_bytes`` (all cameras),
        ``encoded_ahead`` (encodes run on a capture thread before the frame was handed out)."""
        return {"encodes": self._encode_count, "encode_s": round(self._encode_s, 4), "encoded_ahead": self._ahead,
                "encode_share": round(self.cpu.used_share(), 3), "cpu_waits": self.cpu.waits,
                "cache_bytes": sum(f.cache_bytes for f in self._feeds.values())}

    def watching(self, camera_id: str) -> bool:
        """Someone asked for a frame of ``camera_id`` within ``idle_after_s`` (capture at full rate)."""
        return self._clock() < self._feed(camera_id).watched_until

    def latest(self, camera_id: str) -> Frame | None:
        """Newest frame of ``camera_id``, or None before the first. Thread-safe.

        Raises:
            CommandDeclined: unknown camera id.
        """
        return self._feed(camera_id).latest

    def health(self) -> tuple[DeviceHealth, ...]:
        """One :class:`DeviceHealth` per camera, named ``camera.<id>``, in config order."""
        return tuple(feed.health.report() for feed in self._feeds.values())

    async def next_frame(self, camera_id: str, after_seq: int, timeout_s: float) -> Frame | None:
        """Wait for a frame of ``camera_id`` with ``seq > after_seq``; the newest such frame.

        Returns:
            The frame, or None on timeout (``timeout_s``, s) or hub close.

        Raises:
            CommandDeclined: unknown camera id. CommandRejected: ``after_seq`` not an integer.
        """
        feed = self._feed(camera_id)
        if isinstance(after_seq, bool) or not isinstance(after_seq, int):
            raise CommandRejected(f"after_seq must be an integer frame seq, got {after_seq!r}")
        self.capture.watch(feed)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            with feed.lock:
                frame = feed.latest
                if frame is not None and frame.seq > after_seq:
                    return frame
                if self._closed:
                    return None
                waiter = (loop, loop.create_future())
                feed.waiters.append(waiter)
            # the timeout resolves the waiter with None (one timer: no asyncio.timeout, no cancellation)
            expire = loop.call_at(deadline, resolve_all, [waiter[1]], None) if deadline > loop.time() else None
            try:
                woke = expire is not None and await waiter[1] is not None
            finally:
                if expire is not None:
                    expire.cancel()
                with feed.lock:
                    if waiter in feed.waiters:
                        feed.waiters.remove(waiter)
            if not woke:
                return None

    async def next_encoded(self, camera_id: str, fmt: FrameFormat, after_seq: int,
                           timeout_s: float) -> EncodedFrame | None:
        """Wait for a frame newer than ``after_seq`` and return it encoded as ``fmt``.

        Every caller asking for the same (camera, frame, format) shares one encode,
        run on the hub's encoder threads. Pass the last ``seq`` received as
        ``after_seq``; frames in between are skipped.

        Returns:
            The encoded frame, or None on timeout (``timeout_s``, s), close, or an encoder failure.

        Raises:
            CommandDeclined: unknown camera id. CommandRejected: ``fmt`` not a FrameFormat, ``after_seq`` not an integer.
        """
        if not isinstance(fmt, FrameFormat):
            raise CommandRejected(f"frame format must be a FrameFormat, got {type(fmt).__name__}")
        frame = await self.next_frame(camera_id, after_seq, timeout_s)
        if frame is None:
            return None
        return await self.encoded(frame, fmt)

    async def encoded(self, frame: Frame, fmt: FrameFormat) -> EncodedFrame | None:
        """``frame`` encoded as ``fmt``: the shared encode, cached or run now on the encoder threads.

        A new encode first waits while the encoders are over their CPU share; the newest
        frame of the camera is encoded then (the ones captured meanwhile are dropped).

        Returns:
            The encoded frame, or None on close or an encoder failure.
        """
        feed = self._feed(frame.camera_id)
        fmt = resolved_format(fmt, frame.width, frame.height)   # _encoding's own resolve then returns it as is
        with feed.lock:
            cached = (frame.seq, fmt) in feed.encodes
        if not cached and (wait := self.cpu.wait_s()) > 0:
            await asyncio.sleep(wait)
            frame = feed.latest or frame
        future = self._encoding(feed, frame, fmt)
        if future is None:
            return None
        if future.done():       # encoded ahead, or by an earlier consumer: no hop through the loop's self-pipe
            return future.result()
        return await asyncio.shield(self._on_loop(future))

    def _on_loop(self, future: concurrent.futures.Future) -> asyncio.Future:
        """The running loop's view of an encode: one per (encode, loop), so the encoder thread wakes
        each loop once when it is done, not once per consumer (ARTEX, Sim2Bot, console)."""
        loop = asyncio.get_running_loop()
        with self._stats_lock:
            per_loop = self._wrapped.get(future)
            if per_loop is None:
                per_loop = self._wrapped[future] = {}
            wrapped = per_loop.get(loop)
            if wrapped is None:
                wrapped = per_loop[loop] = asyncio.wrap_future(future, loop=loop)
        return wrapped

    async def encoded_within(self, frame: Frame, fmt: FrameFormat, max_bytes: int,
                             level: int = 0) -> tuple[EncodedFrame | None, int]:
        """``frame`` encoded at most ``max_bytes`` long: ``fmt``, else lower quality, else smaller.

        Args:
            frame: the frame. fmt: the wanted format. max_bytes: size limit of the data.
            level: :func:`agent.video.budget.fit_ladder` step to start from (a link's pacer level).

        Returns:
            ``(encoded, level)``: the first ladder step that fits and its index, or
            ``(None, steps)`` when even the smallest does not fit (skip the frame).
        """
        ladder = fit_ladder(fmt, frame.width, frame.height)
        for index in range(min(level, len(ladder) - 1), len(ladder)):
            out = await self.encoded(frame, ladder[index])
            if out is not None and len(out.data) <= max_bytes:
                return out, index
        return None, len(ladder)

    def start(self) -> None:
        """Start the capture, encoder and supervisor threads. Idempotent; returns at once.

        Raises:
            RuntimeError: the hub was closed.
        """
        if self._closed:
            raise RuntimeError("VideoHub.start() after close()")
        if self._started:
            return
        self._started = True
        self._executor = concurrent.futures.ThreadPoolExecutor(self._encode_workers, "video-encode",
                                                               initializer=background_thread)
        self.capture.start()

    def close(self, timeout_s: float = 2.0) -> None:
        """Stop every thread (waiting up to ``timeout_s`` in all) and release the cameras. Idempotent.

        Blocking: call through ``asyncio.to_thread`` from a coroutine. Waiting
        consumers get None. A capture thread blocked inside a driver call is
        left behind; it releases its camera when the call returns.
        """
        if self._closed:
            return
        self._closed = True
        self.capture.close(time.monotonic() + timeout_s)
        if self._executor is not None:
            self._executor.shutdown(wait=False)
        for feed in self._feeds.values():
            with feed.lock:
                waiters, feed.waiters = feed.waiters, []
            wake_waiters(waiters, None)

    def __enter__(self) -> VideoHub:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ encoding

    def _feed(self, camera_id: str) -> Feed:
        feed = self._feeds.get(camera_id) if isinstance(camera_id, str) else None
        if feed is None:
            log.error("video: unknown camera %r requested; known: %s", camera_id, ", ".join(self._feeds))
            raise CommandDeclined(f"unknown camera {camera_id!r}; known: {', '.join(self._feeds) or 'none'}")
        return feed

    def _encoding(self, feed: Feed, frame: Frame, fmt: FrameFormat) -> concurrent.futures.Future | None:
        """The shared encode of (frame, fmt): cached or in flight, else submitted now."""
        fmt = fmt.resolved(frame.width, frame.height)
        key = (frame.seq, fmt)
        with feed.lock:
            asked = feed.asked.get(fmt)
            if asked is None:
                asked = feed.asked[fmt] = set()
            asked.add(frame.seq)
            future = feed.encodes.get(key)
            if future is None:
                if self._executor is None or self._closed:
                    return None
                try:
                    future = self._executor.submit(self._encode, feed, frame, fmt)
                except RuntimeError:  # executor shut down by close() meanwhile
                    return None
                feed.encodes[key] = future
                feed.trim_cache(MAX_CACHED_ENCODES, self._cache_max_bytes)
        return future

    def _encode_ahead(self, feed: Feed, frame: Frame) -> None:
        """Capture thread, before ``frame`` is handed out: encode it in every output asked for each of
        the last ``AHEAD_WINDOW`` frames, while the encoders are within their CPU share and these
        encodes within ``AHEAD_SHARE`` of the frame period. The consumers then find it done: no
        encoder thread woken, no wake-up of their loop for the result (each would otherwise cost a
        context switch per frame and output)."""
        hot = []
        budget, planned = AHEAD_SHARE / feed.cfg.fps, 0.0
        with feed.lock:
            for fmt, seqs in list(feed.asked.items()):
                recent = {s for s in seqs if s >= frame.seq - AHEAD_WINDOW}
                if not recent:
                    del feed.asked[fmt]
                    feed.encode_s.pop(fmt, None)
                    continue
                feed.asked[fmt] = recent
                cost = feed.encode_s.get(fmt)   # None: never timed yet (the encoder threads time it first)
                if cost is not None and len(recent) >= AHEAD_WINDOW and (frame.seq, fmt) not in feed.encodes \
                        and planned + cost <= budget:
                    hot.append(fmt)
                    planned += cost
        for fmt in hot:
            if self._closed or self.cpu.wait_s() > 0:
                return
            future: concurrent.futures.Future = concurrent.futures.Future()
            future.set_running_or_notify_cancel()
            with feed.lock:
                feed.encodes[(frame.seq, fmt)] = future
                feed.trim_cache(MAX_CACHED_ENCODES, self._cache_max_bytes)
            try:
                future.set_result(self._encode(feed, frame, fmt))
            except Exception as err:  # noqa: BLE001 - the consumers get it, as from an encoder thread
                future.set_exception(err)
            with self._stats_lock:          # capture threads of several cameras count here
                self._ahead += 1

    def _encode(self, feed: Feed, frame: Frame, fmt: FrameFormat) -> EncodedFrame | None:
        start = time.perf_counter()
        try:
            out = encode(frame, fmt)
        except cv2.error as err:
            log.error("%s: encoding frame %d as %s failed: %s", feed.name, frame.seq, fmt, err)
            return None
        spent = time.perf_counter() - start
        out = EncodedFrame(out.seq, out.t_unix_s, out.width, out.height, out.codec, out.data, out.t_mono_s, spent)
        self.cpu.spend(spent)
        key = (frame.seq, fmt)
        with self._stats_lock:
            self._encode_count += 1
            self._encode_s += spent
        with feed.lock:
            feed.encode_s[fmt] = spent
            if key in feed.encodes and key not in feed.sizes:
                feed.sizes[key] = len(out.data)
                feed.cache_bytes += len(out.data)
                feed.trim_cache(MAX_CACHED_ENCODES, self._cache_max_bytes)
        return out


def hub_from_config(cfg: AgentConfig) -> VideoHub:
    """The hub of ``cfg.drivers.cameras`` with the ``video`` section's budgets (capture on demand)."""
    v = cfg.video
    return VideoHub(cfg.drivers.cameras, probe_period_s=v.probe_period_s, idle_after_s=v.idle_after_s,
                    cache_max_bytes=int(v.cache_max_mib * 1024 * 1024), encode_cpu_share=v.encode_cpu_share)
