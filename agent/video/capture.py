"""Camera capture: a component of :class:`agent.video.VideoHub` with its own state and threads.

:class:`Capture` holds one :class:`Feed` per camera (the newest :class:`Frame`, the waiting
consumers, the encode cache the hub fills) and runs, per camera, one capture thread: an
:class:`agent.devices.worker.DeviceWorker` (:class:`CaptureRun`) that opens the camera, calls
:meth:`drivers.camera.Camera.read` and keeps only the newest frame, and reopens the camera
after a backoff when it fails; a supervisor thread notices reads or opens that hang. While
nobody watches a camera (no consumer asked for a frame within ``idle_after_s``) its thread
reads one frame every ``probe_period_s`` only, a health probe, so a failed camera is still
noticed; the first request wakes it (:meth:`Capture.watch`).

Supervision, per camera, with health ``ok`` / ``degraded`` / ``lost`` kept by
an :class:`agent.devices.health.HealthTracker` (each transition logged once):

- a failed read -> ``degraded``; no frame for ``stale_s`` -> ``lost``, reopen;
- identical frame content (CRC of a subsample) for ``stale_s`` -> ``lost``, reopen;
- ``read()`` or ``open()`` blocked for ``stale_s`` -> ``lost``; the blocked
  thread is left to finish on its own (it releases its capture when the call
  returns: OpenCV captures are not released under a running read) and a new
  capture thread reopens the camera, at most ``max_stuck_threads`` left behind;
- a driver raising something other than DriverError (a bug,
  :class:`agent.devices.supervisor.DriverGuard`: its traceback logged once) -> ``lost``, reopen;
- reopen attempts wait a jittered, capped, exponential backoff.

Wake-ups: a capture thread sleeps in the camera's read while watched, else until its next
probe or a request; the supervisor sleeps until the earliest moment a call in progress
could have hung for ``stale_s`` (at most ``stale_s`` when none is in progress).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import math
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np

from agent.config.drivers import CameraConfig
from agent.devices.health import DEGRADED, LOST, OK, HealthTracker
from agent.devices.supervisor import DriverBug, DriverGuard
from agent.devices.worker import DeviceWorker, Poll
from agent.errors import DriverError
from agent.support.heap import release_memory
from agent.support.ratelimit import RateLimitedLog, backoff_s
from agent.support.threadprio import background_thread
from agent.video.frames import Frame, FrameFormat, content_digest
from drivers.camera import Camera

log = logging.getLogger("agent.video")

#: Encodings of frames this many seqs older than the newest are dropped at each new frame.
KEEP_FRAMES = 2

Waiter = tuple[asyncio.AbstractEventLoop, asyncio.Future]


def resolve_all(futs: list[asyncio.Future], frame: Frame | None) -> None:  # each not done yet gets ``frame``
    for fut in futs:
        if not fut.done():
            fut.set_result(frame)


def wake_waiters(waiters: list[Waiter], frame: Frame | None) -> None:
    """Resolve the waiters' futures with ``frame``: one wake-up per event loop, however many wait."""
    by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future]] = {}
    for loop, fut in waiters:
        by_loop.setdefault(loop, []).append(fut)
    for loop, futs in by_loop.items():
        try:
            loop.call_soon_threadsafe(resolve_all, futs, frame)
        except RuntimeError:  # that consumer's loop is closed
            log.debug("video: dropped a waiter of a closed event loop")


class Feed:
    """Capture state of one camera; mutable fields guarded by ``lock``."""

    def __init__(self, cfg: CameraConfig) -> None:
        self.cfg = cfg
        self.name = f"camera.{cfg.id}"
        self.lock = threading.Lock()
        self.latest: Frame | None = None
        self.seq = 0
        self.run: CaptureRun | None = None
        self.left_behind: list[DeviceWorker] = []   # capture threads blocked in a driver call
        self.health = HealthTracker(self.name, log, error_when_ok=True)  # lost until the first frame
        self.waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = []
        self.encodes: OrderedDict[tuple[int, FrameFormat], concurrent.futures.Future] = OrderedDict()
        #: bytes of each finished encode in ``encodes`` and their sum (the byte bound).
        self.sizes: dict[tuple[int, FrameFormat], int] = {}
        self.cache_bytes = 0
        #: output -> the recent frame seqs a consumer asked in it (the hub's encode-ahead hint)
        self.asked: dict[FrameFormat, set[int]] = {}
        #: output -> how long its last encode took, s
        self.encode_s: dict[FrameFormat, float] = {}
        #: monotonic time until which someone watches this camera (capture at full rate).
        self.watched_until = 0.0
        #: the encodes were dropped and the heap trimmed since the last watcher left.
        self.released = False

    def drop_encodes(self, keys: list[tuple[int, FrameFormat]]) -> None:
        """Forget these encodes (caller holds ``lock``)."""
        for key in keys:
            self.encodes.pop(key, None)
            self.cache_bytes -= self.sizes.pop(key, 0)

    def trim_cache(self, max_entries: int, max_bytes: int) -> None:
        """Drop the oldest encodes beyond ``max_entries`` or ``max_bytes`` (caller holds ``lock``)."""
        if len(self.encodes) <= max_entries and self.cache_bytes <= max_bytes:
            return
        for key in list(self.encodes):
            if len(self.encodes) <= max_entries and self.cache_bytes <= max_bytes:
                return
            self.drop_encodes([key])


class CaptureRun:
    """One capture thread of a feed (a :class:`DeviceWorker`); replaced when left blocked in a driver call.

    To its worker it is the device to reopen (:meth:`reopen_in`, :meth:`try_open`); its one
    poll reads a frame: again at once while watched (the read waits for the camera), every
    ``probe_period_s`` while not, after a short pause while reads fail.
    """

    def __init__(self, capture: Capture, feed: Feed) -> None:
        self._cap = capture
        self.feed = feed
        #: ``(t_mono_s, "open" | "read")`` while inside a blocking driver call, else None.
        self.busy: tuple[float, str] | None = None
        self._camera: Camera | None = None
        self._guard = DriverGuard(feed.name, log)
        self._attempt = 0
        self._next_open = capture.clock()
        self._seq_at_open = feed.seq
        self._last_digest: int | None = None
        self._changed_at = 0.0
        self._failing_since: float | None = None
        self._read = Poll(self._read_frame, 0.0)
        self._read.due = math.inf                       # after the open
        self.worker = DeviceWorker(f"camera-{feed.cfg.id}", [self], serve=self._serve, polls=[self._read],
                                   on_reopen=self._opened, on_start=background_thread, on_exit=self._release,
                                   clock=capture.clock)

    def current(self) -> bool:
        """This run is the feed's capture thread and the capture is not closing."""
        return not self.worker.stopping and self.feed.run is self

    def watch(self) -> None:
        """Someone started watching: read a frame now."""
        self.worker.post("watch", True)

    # ------------------------------------------------------------------ its worker's device
    def reopen_in(self) -> float | None:
        return None if self._camera is not None else max(0.0, self._next_open - self._cap.clock())

    def try_open(self) -> bool:
        made: list[Camera] = []
        self._seq_at_open = self.feed.seq           # frames since: the next backoff starts over

        def open_new() -> None:
            made.append(self._cap.camera_factory(self.feed.cfg))
            self.busy = (self._cap.clock(), "open")
            made[0].open()
        try:
            self._guard.call(open_new, "open")
        except DriverError as err:
            self.busy = None
            self._lost(str(err), made[0] if made else None)
            return False
        self.busy = None
        self._camera = made[0]
        self._last_digest, self._changed_at, self._failing_since = None, self._cap.clock(), None
        return True

    # ------------------------------------------------------------------ the thread
    def _opened(self, _run: CaptureRun) -> None:
        self._read.due = None

    def _serve(self) -> None:
        taken = self.worker.take()
        if taken is not None:
            if self._camera is not None:
                self._read.due = None
            self.worker.finish(taken[1])

    def _lost(self, error: str, camera: Camera | None) -> None:
        """Close the camera, mark the feed lost, schedule the reopen after the backoff."""
        if self.current():
            self.feed.health.fail(LOST, error)
        if camera is not None:
            camera.close()
        self._camera = None
        self._attempt = 0 if self.feed.seq > self._seq_at_open else self._attempt + 1
        self._next_open = self._cap.clock() + self._cap.backoff_s(self._attempt)

    def _release(self) -> None:
        self.busy = None
        if self._camera is not None:
            self._camera.close()
            self._camera = None

    def _read_frame(self) -> float:
        """Read one frame; the wait until the next read, s (inf: none until the reopen)."""
        camera, feed, clock = self._camera, self.feed, self._cap.clock
        if camera is None:
            return math.inf
        stale_s = feed.cfg.stale_s
        self.busy = (clock(), "read")
        try:
            image, t_mono_s = self._guard.call(camera.read, "capture")
        except DriverBug as err:
            self.busy = None
            self._lost(str(err), camera)
            return math.inf
        except DriverError as err:
            self.busy = None
            now = clock()
            self._failing_since = now if self._failing_since is None else self._failing_since
            if now - self._failing_since >= stale_s:
                self._lost(f"{feed.name}: no frame for {now - self._failing_since:.1f} s: {err}", camera)
                return math.inf
            if self.current():
                feed.health.fail(DEGRADED, str(err))
            return min(0.05, stale_s / 10)
        self.busy = None
        self._failing_since = None
        digest = content_digest(image)
        if digest == self._last_digest:
            if t_mono_s - self._changed_at >= stale_s:
                self._lost(f"{feed.name}: frame content unchanged for {t_mono_s - self._changed_at:.1f} s "
                           "(frozen)", camera)
                return math.inf
            return 0.0
        self._last_digest, self._changed_at = digest, t_mono_s
        if not self.current():
            return math.inf
        self._cap.publish(feed, image, t_mono_s)
        return self._idle_period()

    def _idle_period(self) -> float:
        """0 while someone watches; else drop the encodes (once per idle spell) and wait ``probe_period_s``."""
        feed, probe_s = self.feed, self._cap.probe_s
        if probe_s is None or self._cap.clock() < feed.watched_until:
            return 0.0
        if not feed.released:              # once per idle spell: the encodes, then the heap they used
            with feed.lock:
                feed.drop_encodes(list(feed.encodes))
            release_memory()
            feed.released = True
        return probe_s


class Capture:
    """The capture threads and their supervisor for some cameras; see the module docstring.

    Args:
        cameras: camera config sections (ids unique).
        camera_factory: ``cfg -> Camera`` (not opened); called for every (re)open.
        reopen_delay_s, reopen_delay_max_s: first and largest reopen backoff, s (jittered 50..100 %).
        max_stuck_threads: capture threads left blocked in a driver call, per camera, before
            no new one is started until one returns.
        probe_period_s: None: capture always; a number: capture only while watched, else one
            frame every ``probe_period_s`` s.
        idle_after_s: how long one request counts as someone watching, s.
        clock: monotonic clock, s. wall_clock: Unix clock, s. rng: jitter source.

    Attributes:
        feeds: camera id -> :class:`Feed`, in config order.
        before_publish: called on the capture thread with each new frame before it becomes the
            feed's newest and its waiters wake (the hub encodes ahead there), or None; an exception
            it raises is logged and the frame is published all the same.
    """

    def __init__(self, cameras: Sequence[CameraConfig], *, camera_factory: Callable[[CameraConfig], Camera] = Camera,
                 reopen_delay_s: float = 0.2, reopen_delay_max_s: float = 5.0, max_stuck_threads: int = 2,
                 probe_period_s: float | None = None, idle_after_s: float = 3.0,
                 clock: Callable[[], float] = time.monotonic, wall_clock: Callable[[], float] = time.time,
                 rng: random.Random | None = None) -> None:
        self.feeds = {c.id: Feed(c) for c in cameras}
        self.camera_factory = camera_factory
        self.probe_s = probe_period_s
        self.clock = clock
        self._delay_s, self._delay_max_s = reopen_delay_s, reopen_delay_max_s
        self._max_stuck = max(1, max_stuck_threads)
        self._idle_after_s = idle_after_s
        self._wall = wall_clock
        self._rng = rng or random.Random()
        self._stop = threading.Event()
        self._supervisor: threading.Thread | None = None
        self.before_publish: Callable[[Feed, Frame], None] | None = None
        self._bugs = RateLimitedLog(log, 10.0)      # a bug in before_publish: one traceback per 10 s

    def start(self) -> None:
        """Start a capture thread per camera and the supervisor. Once."""
        for feed in self.feeds.values():
            with feed.lock:
                self._spawn(feed)
        self._supervisor = threading.Thread(target=self._supervise, name="video-supervisor", daemon=True)
        self._supervisor.start()

    def close(self, deadline: float) -> None:
        """Stop every thread, waiting until ``deadline`` (``time.monotonic()``) in all; a thread
        still blocked in a driver call is left behind (logged) and releases its camera when it returns."""
        self._stop.set()
        runs = []
        for feed in self.feeds.values():
            with feed.lock:  # the supervisor may be in _spawn (run assigned, not yet started)
                if feed.run is not None:
                    runs.append(feed.run)
        for run in runs:
            run.worker.close(max(0.0, deadline - time.monotonic()))
            if run.worker.alive:
                log.warning("video: thread %s still blocked in a driver call; left behind", run.worker.name)
        if self._supervisor is not None:
            self._supervisor.join(max(0.0, deadline - time.monotonic()))

    def watch(self, feed: Feed) -> None:
        """Someone wants frames of ``feed``: capture at full rate for ``idle_after_s`` more."""
        now = self.clock()
        idle = now >= feed.watched_until
        feed.watched_until = now + self._idle_after_s
        if idle:
            feed.released = False
            run = feed.run
            if run is not None:
                run.watch()

    def backoff_s(self, attempt: int) -> float:
        """The wait before reopen number ``attempt`` (0 after a camera that delivered frames), s."""
        return backoff_s(attempt - 1, self._delay_s, self._delay_max_s, self._rng)

    def publish(self, feed: Feed, image: np.ndarray, t_mono_s: float) -> None:
        """Make ``image`` the feed's newest frame and wake its waiters (capture thread)."""
        image.flags.writeable = False
        t_unix_s = self._wall() - (self.clock() - t_mono_s)
        with feed.lock:
            feed.seq += 1
            frame = Frame(feed.cfg.id, feed.seq, t_mono_s, t_unix_s, image)
        if self.before_publish is not None:
            try:
                self.before_publish(feed, frame)
            except Exception:  # noqa: BLE001 - a bug there must not cost the frame or the thread
                self._bugs.log(logging.ERROR, ("before_publish", feed.name), "%s: work before publishing frame %d failed",
                               feed.name, frame.seq, exc_info=True)
        with feed.lock:
            feed.latest = frame
            waiters, feed.waiters = feed.waiters, []
            feed.drop_encodes([k for k in feed.encodes if k[0] < frame.seq - KEEP_FRAMES])
        if feed.health.state != OK:
            feed.health.recover()
        wake_waiters(waiters, frame)

    # ------------------------------------------------------------------ supervision
    def _spawn(self, feed: Feed) -> None:
        """Start a capture thread for ``feed`` (caller holds ``feed.lock``)."""
        run = CaptureRun(self, feed)
        feed.run = run
        run.worker.start()

    def _supervise(self) -> None:
        """Detect driver calls blocked for ``stale_s``; replace their thread (bounded). Sleeps until
        the earliest call in progress would reach ``stale_s``, at most the shortest ``stale_s``."""
        shortest_s = min((f.cfg.stale_s for f in self.feeds.values()), default=1.0)
        wait = shortest_s
        while not self._stop.wait(wait):
            wait = shortest_s
            for feed in self.feeds.values():
                wait = min(wait, self._check_blocked(feed))
            wait = max(wait, 0.01)

    def _check_blocked(self, feed: Feed) -> float:
        """Replace ``feed``'s thread when blocked for ``stale_s`` or ended; the time until its call
        in progress would reach ``stale_s``, s (inf: none in progress)."""
        now = self.clock()
        error = ""
        with feed.lock:
            feed.left_behind = [w for w in feed.left_behind if w.alive]
            run = feed.run
            busy = run.busy if run else None
            if run is not None and busy is not None and now - busy[0] >= feed.cfg.stale_s:
                error = f"{feed.name}: {busy[1]}() blocked for {now - busy[0]:.1f} s"
                feed.left_behind.append(run.worker)
                run.worker.close(0.0)
                feed.run = None
            elif run is not None and not run.worker.alive:
                error = f"{feed.name}: capture thread ended unexpectedly"
                feed.run = None
            if feed.run is None and len(feed.left_behind) < self._max_stuck and not self._stop.is_set():
                self._spawn(feed)
            busy = feed.run.busy if feed.run is not None else None
        if error:
            feed.health.fail(LOST, error)
        return math.inf if busy is None else busy[0] + feed.cfg.stale_s - now
