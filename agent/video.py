"""Video hub: capture once per camera, encode once per (camera, frame, format), fan out the latest frame.

Threads (docs/architecture.md): one capture thread per configured camera
calls :meth:`drivers.camera.Camera.read` and keeps only the newest
:class:`Frame`; a small encoder pool turns frames into JPEG or raw RGBA; one
supervisor thread notices reads or opens that hang. The asyncio side only
awaits: :meth:`VideoHub.next_encoded` waits (on the caller's loop, woken with
``loop.call_soon_threadsafe``) for a frame newer than the one the consumer
has, then awaits its encoding, shared by every consumer asking for the same
frame and :class:`FrameFormat`. A slow consumer simply gets the newest frame
on its next call: there is no queue.

Supervision, per camera, with health ``ok`` / ``degraded`` / ``lost`` kept by
an :class:`agent.health.HealthTracker` (each transition logged once):

- a failed read -> ``degraded``; no frame for ``stale_s`` -> ``lost``, reopen;
- identical frame content (CRC of a subsample) for ``stale_s`` -> ``lost``, reopen;
- ``read()`` or ``open()`` blocked for ``stale_s`` -> ``lost``; the blocked
  thread is left to finish on its own (it releases its capture when the call
  returns: OpenCV captures are not released under a running read) and a new
  capture thread reopens the camera, at most ``max_stuck_threads`` left behind;
- reopen attempts wait a jittered, capped, exponential backoff.

Raw RGBA is bottom-up (the first row sent is the image's bottom row), as the
Sim2Bot reference reader ``sim2bot.client.CameraFrame.image`` flips raw frames.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import random
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import cv2
import numpy as np

from agent.config.drivers import CameraConfig
from agent.errors import CommandError, ConfigError, DriverError
from agent.health import DEGRADED, LOST, OK, HealthTracker
from agent.model import DeviceHealth
from agent.ratelimit import backoff_s
from drivers.camera import Camera

log = logging.getLogger(__name__)

#: Encodings kept per camera (a few recent frames x formats); older ones are dropped.
MAX_CACHED_ENCODES = 32
#: Encodings of frames this many seqs older than the newest are dropped at each new frame.
KEEP_FRAMES = 2
MAX_OUTPUT_SIZE = 4096


# --------------------------------------------------------------------------- frames and formats


@dataclass(frozen=True, slots=True, eq=False)
class Frame:
    """One captured frame. Immutable; ``image`` is a read-only array.

    Attributes:
        camera_id: config id of the camera.
        seq: per-camera frame counter, from 1, increasing across reopens.
        t_mono_s: capture time, s, agent monotonic clock. t_unix_s: the same instant, Unix s.
        image: BGR uint8, shape (height, width, 3).
    """

    camera_id: str
    seq: int
    t_mono_s: float
    t_unix_s: float
    image: np.ndarray

    @property
    def width(self) -> int:
        """Frame width, px."""
        return int(self.image.shape[1])

    @property
    def height(self) -> int:
        """Frame height, px."""
        return int(self.image.shape[0])


def _encode_jpeg(image: np.ndarray, quality: int) -> bytes:
    ok, buf = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise cv2.error("cv2.imencode('.jpg') returned False")
    return buf.tobytes()


def _encode_rgba(image: np.ndarray, quality: int) -> bytes:
    """Raw RGBA, width*height*4 bytes, rows bottom-up (WebGL order); ``quality`` unused."""
    return cv2.flip(cv2.cvtColor(image, cv2.COLOR_BGR2RGBA), 0).tobytes()


#: codec -> ``(image_bgr, quality) -> bytes``.
ENCODERS: dict[str, Callable[[np.ndarray, int], bytes]] = {"jpeg": _encode_jpeg, "rgba": _encode_rgba}


def _optional_size(name: str, value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_OUTPUT_SIZE:
        raise CommandError(f"frame {name} must be an integer 1..{MAX_OUTPUT_SIZE} or None, got {value!r}")


@dataclass(frozen=True, slots=True)
class FrameFormat:
    """How a consumer wants frames encoded. Frozen and hashable: the encode-cache key.

    Attributes:
        codec: ``jpeg`` or ``rgba`` (raw, bottom-up rows).
        width, height: output size, px; None keeps the camera's. One alone keeps the aspect ratio.
        quality: JPEG quality 1..100 (ignored for ``rgba``).

    Raises:
        CommandError: unknown codec, size out of 1..4096, quality out of 1..100.
    """

    codec: str = "jpeg"
    width: int | None = None
    height: int | None = None
    quality: int = 80

    def __post_init__(self) -> None:
        if self.codec not in ENCODERS:
            raise CommandError(f"unknown frame codec {self.codec!r}; known: {', '.join(ENCODERS)}")
        _optional_size("width", self.width)
        _optional_size("height", self.height)
        q = self.quality
        if isinstance(q, bool) or not isinstance(q, int) or not 1 <= q <= 100:
            raise CommandError(f"JPEG quality must be an integer 1..100, got {q!r}")

    def output_size(self, width: int, height: int) -> tuple[int, int]:
        """Size, px, of a ``width`` x ``height`` frame encoded in this format."""
        if self.width is not None and self.height is not None:
            return self.width, self.height
        if self.width is not None:
            return self.width, max(1, round(height * self.width / width))
        if self.height is not None:
            return max(1, round(width * self.height / height)), self.height
        return width, height


@dataclass(frozen=True, slots=True)
class EncodedFrame:
    """One frame in one format.

    Attributes:
        seq: the :class:`Frame` seq. t_unix_s: capture time, Unix s.
        width, height: encoded size, px. codec: ``jpeg`` | ``rgba``.
        data: JPEG file bytes, or width*height*4 RGBA bytes with bottom-up rows.
    """

    seq: int
    t_unix_s: float
    width: int
    height: int
    codec: str
    data: bytes


def encode(frame: Frame, fmt: FrameFormat) -> EncodedFrame:
    """Resize (area when shrinking, linear when growing) and encode ``frame``. Blocking: not on the event loop.

    Raises:
        cv2.error: OpenCV failed to encode.
    """
    w, h = fmt.output_size(frame.width, frame.height)
    image = frame.image
    if (w, h) != (frame.width, frame.height):
        shrink = w * h < frame.width * frame.height
        image = cv2.resize(image, (w, h), interpolation=cv2.INTER_AREA if shrink else cv2.INTER_LINEAR)
    return EncodedFrame(frame.seq, frame.t_unix_s, w, h, fmt.codec, ENCODERS[fmt.codec](image, fmt.quality))


def content_digest(image: np.ndarray) -> int:
    """CRC32 of a ~64-row subsample: equal digests mean a frozen source, not a still scene (sensor noise)."""
    step = max(1, min(image.shape[0], image.shape[1]) // 64)
    return zlib.crc32(np.ascontiguousarray(image[::step, ::step]))


def _resolve(fut: asyncio.Future, frame: Frame | None) -> None:
    if not fut.done():
        fut.set_result(frame)


# --------------------------------------------------------------------------- per-camera state


class _Run:
    """One capture thread's lifetime; replaced when its thread is left behind blocked."""

    __slots__ = ("thread", "busy")

    def __init__(self) -> None:
        self.thread: threading.Thread | None = None
        #: ``(t_mono_s, "open" | "read")`` while inside a blocking driver call, else None.
        self.busy: tuple[float, str] | None = None


class _Feed:
    """Capture state of one camera; mutable fields guarded by ``lock``."""

    def __init__(self, cfg: CameraConfig) -> None:
        self.cfg = cfg
        self.name = f"camera.{cfg.id}"
        self.lock = threading.Lock()
        self.latest: Frame | None = None
        self.seq = 0
        self.run: _Run | None = None
        self.left_behind: list[threading.Thread] = []
        self.health = HealthTracker(self.name, log, error_when_ok=True)  # lost until the first frame
        self.waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = []
        self.encodes: OrderedDict[tuple[int, FrameFormat], concurrent.futures.Future] = OrderedDict()


# --------------------------------------------------------------------------- hub


class VideoHub:
    """Latest-frame capture, shared encoding and health for every configured camera.

    Args:
        cameras: camera config sections (ids unique).
        camera_factory: ``cfg -> Camera`` (not opened); called for every (re)open.
        encode_workers: encoder threads (``cv2.imencode`` releases the GIL).
        reopen_delay_s, reopen_delay_max_s: first and largest reopen backoff, s (jittered 50..100 %).
        max_stuck_threads: capture threads left blocked in a driver call, per camera, before
            the hub stops starting new ones until one returns.
        clock: monotonic clock, s. wall_clock: Unix clock, s. rng: jitter source.

    Raises:
        ConfigError: two cameras with the same id.
    """

    def __init__(self, cameras: Sequence[CameraConfig], *,
                 camera_factory: Callable[[CameraConfig], Camera] = Camera, encode_workers: int = 2,
                 reopen_delay_s: float = 0.2, reopen_delay_max_s: float = 5.0, max_stuck_threads: int = 2,
                 clock: Callable[[], float] = time.monotonic, wall_clock: Callable[[], float] = time.time,
                 rng: random.Random | None = None) -> None:
        ids = [c.id for c in cameras]
        if len(ids) != len(set(ids)):
            raise ConfigError(f"camera ids used twice: {ids}", [("$.drivers.cameras", "camera ids used twice")])
        self._feeds = {c.id: _Feed(c) for c in cameras}
        self._camera_factory = camera_factory
        self._encode_workers = max(1, encode_workers)
        self._delay_s = reopen_delay_s
        self._delay_max_s = reopen_delay_max_s
        self._max_stuck = max(1, max_stuck_threads)
        self._clock = clock
        self._wall = wall_clock
        self._rng = rng or random.Random()
        self._stop = threading.Event()
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._supervisor: threading.Thread | None = None
        self._stats_lock = threading.Lock()
        self._encode_count = 0
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

    def latest(self, camera_id: str) -> Frame | None:
        """Newest frame of ``camera_id``, or None before the first. Thread-safe.

        Raises:
            CommandError: unknown camera id.
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
            CommandError: unknown camera id, ``after_seq`` not an integer.
        """
        feed = self._feed(camera_id)
        if isinstance(after_seq, bool) or not isinstance(after_seq, int):
            raise CommandError(f"after_seq must be an integer frame seq, got {after_seq!r}")
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
            remaining = deadline - loop.time()
            try:
                woke = remaining > 0 and await asyncio.wait_for(waiter[1], remaining) is not None
            except TimeoutError:
                woke = False
            finally:
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
            CommandError: unknown camera id, ``fmt`` not a FrameFormat, ``after_seq`` not an integer.
        """
        if not isinstance(fmt, FrameFormat):
            raise CommandError(f"frame format must be a FrameFormat, got {type(fmt).__name__}")
        frame = await self.next_frame(camera_id, after_seq, timeout_s)
        if frame is None:
            return None
        future = self._encoding(self._feeds[camera_id], frame, fmt)
        if future is None:
            return None
        return await asyncio.shield(asyncio.wrap_future(future))

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
        self._executor = concurrent.futures.ThreadPoolExecutor(self._encode_workers, "video-encode")
        for feed in self._feeds.values():
            with feed.lock:
                self._spawn(feed)
        self._supervisor = threading.Thread(target=self._supervise, name="video-supervisor", daemon=True)
        self._supervisor.start()

    def close(self, timeout_s: float = 2.0) -> None:
        """Stop every thread (waiting up to ``timeout_s`` in all) and release the cameras. Idempotent.

        Blocking: call through ``asyncio.to_thread`` from a coroutine. Waiting
        consumers get None. A capture thread blocked inside a driver call is
        left behind; it releases its camera when the call returns.
        """
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        deadline = time.monotonic() + timeout_s
        threads = [f.run.thread for f in self._feeds.values() if f.run and f.run.thread]
        for thread in threads + ([self._supervisor] if self._supervisor else []):
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                log.warning("video: thread %s still blocked in a driver call; left behind", thread.name)
        if self._executor is not None:
            self._executor.shutdown(wait=False)
        for feed in self._feeds.values():
            with feed.lock:
                waiters, feed.waiters = feed.waiters, []
            self._wake(waiters, None)

    def __enter__(self) -> VideoHub:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ encoding

    def _feed(self, camera_id: str) -> _Feed:
        feed = self._feeds.get(camera_id) if isinstance(camera_id, str) else None
        if feed is None:
            log.error("video: unknown camera %r requested; known: %s", camera_id, ", ".join(self._feeds))
            raise CommandError(f"unknown camera {camera_id!r}; known: {', '.join(self._feeds) or 'none'}")
        return feed

    def _encoding(self, feed: _Feed, frame: Frame, fmt: FrameFormat) -> concurrent.futures.Future | None:
        """The shared encode of (frame, fmt): cached or in flight, else submitted now."""
        key = (frame.seq, fmt)
        with feed.lock:
            future = feed.encodes.get(key)
            if future is None:
                if self._executor is None or self._closed:
                    return None
                try:
                    future = self._executor.submit(self._encode, feed, frame, fmt)
                except RuntimeError:  # executor shut down by close() meanwhile
                    return None
                feed.encodes[key] = future
                while len(feed.encodes) > MAX_CACHED_ENCODES:
                    feed.encodes.popitem(last=False)
        return future

    def _encode(self, feed: _Feed, frame: Frame, fmt: FrameFormat) -> EncodedFrame | None:
        try:
            out = encode(frame, fmt)
        except cv2.error as err:
            log.error("%s: encoding frame %d as %s failed: %s", feed.name, frame.seq, fmt, err)
            return None
        with self._stats_lock:
            self._encode_count += 1
        return out

    # ------------------------------------------------------------------ capture

    def _spawn(self, feed: _Feed) -> None:
        """Start a capture thread for ``feed`` (caller holds ``feed.lock``)."""
        run = _Run()
        run.thread = threading.Thread(target=self._capture, args=(feed, run), name=f"camera-{feed.cfg.id}",
                                      daemon=True)
        feed.run = run
        run.thread.start()

    def _current(self, feed: _Feed, run: _Run) -> bool:
        return not self._stop.is_set() and feed.run is run

    def _capture(self, feed: _Feed, run: _Run) -> None:
        """Capture thread: open, pump frames, on failure close and reopen with backoff."""
        attempt = 0
        while self._current(feed, run):
            seq_before = feed.seq
            camera: Camera | None = None
            try:
                camera = self._camera_factory(feed.cfg)
                run.busy = (self._clock(), "open")
                camera.open()
                run.busy = None
                self._pump(feed, run, camera)
            except DriverError as err:
                run.busy = None
                if self._current(feed, run):
                    feed.health.fail(LOST, str(err))
            except Exception as err:  # noqa: BLE001 - a driver bug: keep this thread, reopen with backoff
                run.busy = None
                if self._current(feed, run):
                    error = f"unexpected {type(err).__name__}: {err}"
                    if error != feed.health.last_error:  # the traceback once per distinct failure
                        log.error("capture of %s raised %s instead of DriverError", feed.name,
                                  type(err).__name__, exc_info=True)
                    feed.health.fail(LOST, error)
            finally:
                if camera is not None:
                    camera.close()
            attempt = 0 if feed.seq > seq_before else attempt + 1
            if self._current(feed, run):
                self._stop.wait(self._backoff_s(attempt))

    def _backoff_s(self, attempt: int) -> float:
        return backoff_s(attempt - 1, self._delay_s, self._delay_max_s, self._rng)

    def _pump(self, feed: _Feed, run: _Run, camera: Camera) -> None:
        """Read until stopped or replaced. Raises DriverError when the camera is stale."""
        stale_s = feed.cfg.stale_s
        last_digest: int | None = None
        changed_at = self._clock()
        failing_since: float | None = None
        while self._current(feed, run):
            run.busy = (self._clock(), "read")
            try:
                image, t_mono_s = camera.read()
            except DriverError as err:
                run.busy = None
                now = self._clock()
                failing_since = now if failing_since is None else failing_since
                if now - failing_since >= stale_s:
                    raise DriverError(f"{feed.name}: no frame for {now - failing_since:.1f} s: {err}",
                                      device=feed.name) from err
                if self._current(feed, run):
                    feed.health.fail(DEGRADED, str(err))
                self._stop.wait(min(0.05, stale_s / 10))
                continue
            run.busy = None
            failing_since = None
            digest = content_digest(image)
            if digest == last_digest:
                if t_mono_s - changed_at >= stale_s:
                    raise DriverError(f"{feed.name}: frame content unchanged for {t_mono_s - changed_at:.1f} s "
                                      "(frozen)", device=feed.name)
                continue
            last_digest, changed_at = digest, t_mono_s
            if self._current(feed, run):
                self._publish(feed, image, t_mono_s)

    def _publish(self, feed: _Feed, image: np.ndarray, t_mono_s: float) -> None:
        image.flags.writeable = False
        t_unix_s = self._wall() - (self._clock() - t_mono_s)
        with feed.lock:
            feed.seq += 1
            frame = Frame(feed.cfg.id, feed.seq, t_mono_s, t_unix_s, image)
            feed.latest = frame
            waiters, feed.waiters = feed.waiters, []
            for key in [k for k in feed.encodes if k[0] < frame.seq - KEEP_FRAMES]:
                del feed.encodes[key]
        if feed.health.state != OK:
            feed.health.recover()
        self._wake(waiters, frame)

    @staticmethod
    def _wake(waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future]], frame: Frame | None) -> None:
        for loop, fut in waiters:
            try:
                loop.call_soon_threadsafe(_resolve, fut, frame)
            except RuntimeError:  # that consumer's loop is closed
                log.debug("video: dropped a waiter of a closed event loop")

    # ------------------------------------------------------------------ supervision

    def _supervise(self) -> None:
        """Detect driver calls blocked for ``stale_s``; replace their thread (bounded)."""
        period_s = min(0.25, max(0.02, min((f.cfg.stale_s for f in self._feeds.values()), default=1.0) / 4))
        while not self._stop.wait(period_s):
            for feed in self._feeds.values():
                self._check_blocked(feed)

    def _check_blocked(self, feed: _Feed) -> None:
        now = self._clock()
        error = ""
        with feed.lock:
            feed.left_behind = [t for t in feed.left_behind if t.is_alive()]
            run = feed.run
            busy = run.busy if run else None
            if run is not None and busy is not None and now - busy[0] >= feed.cfg.stale_s:
                error = f"{feed.name}: {busy[1]}() blocked for {now - busy[0]:.1f} s"
                if run.thread is not None:
                    feed.left_behind.append(run.thread)
                feed.run = None
            elif run is not None and run.thread is not None and not run.thread.is_alive():
                error = f"{feed.name}: capture thread ended unexpectedly"
                feed.run = None
            if feed.run is None and len(feed.left_behind) < self._max_stuck and not self._stop.is_set():
                self._spawn(feed)
        if error:
            feed.health.fail(LOST, error)
