"""Capture threads and their supervision (the capture half of :class:`agent.video.VideoHub`).

One capture thread per camera calls :meth:`drivers.camera.Camera.read` and keeps
only the newest :class:`Frame`; a supervisor thread notices reads or opens that
hang. While nobody watches a camera (no consumer asked for a frame within the
hub's ``idle_after_s``) the thread reads one frame every ``probe_period_s`` only,
a health probe, so a failed camera is still noticed; the first request wakes it.

Supervision, per camera, with health ``ok`` / ``degraded`` / ``lost`` kept by
an :class:`agent.devices.health.HealthTracker` (each transition logged once):

- a failed read -> ``degraded``; no frame for ``stale_s`` -> ``lost``, reopen;
- identical frame content (CRC of a subsample) for ``stale_s`` -> ``lost``, reopen;
- ``read()`` or ``open()`` blocked for ``stale_s`` -> ``lost``; the blocked
  thread is left to finish on its own (it releases its capture when the call
  returns: OpenCV captures are not released under a running read) and a new
  capture thread reopens the camera, at most ``max_stuck_threads`` left behind;
- reopen attempts wait a jittered, capped, exponential backoff.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections import OrderedDict

import numpy as np

from agent.config.drivers import CameraConfig
from agent.errors import DriverError
from agent.support.heap import release_memory
from agent.devices.health import DEGRADED, LOST, OK, HealthTracker
from agent.support.ratelimit import backoff_s
from agent.support.threadprio import background_thread
from agent.video.frames import Frame, FrameFormat, content_digest
from drivers.camera import Camera

log = logging.getLogger("agent.video")

#: Encodings of frames this many seqs older than the newest are dropped at each new frame.
KEEP_FRAMES = 2


def _resolve(futs: list[asyncio.Future], frame: Frame | None) -> None:
    for fut in futs:
        if not fut.done():
            fut.set_result(frame)


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
        #: bytes of each finished encode in ``encodes`` and their sum (the byte bound).
        self.sizes: dict[tuple[int, FrameFormat], int] = {}
        self.cache_bytes = 0
        #: monotonic time until which someone watches this camera (capture at full rate).
        self.watched_until = 0.0
        self.wake = threading.Event()
        #: the encodes were dropped and the heap trimmed since the last watcher left.
        self.released = False

    def drop_encodes(self, keys: list[tuple[int, FrameFormat]]) -> None:
        """Forget these encodes (caller holds ``lock``)."""
        for key in keys:
            self.encodes.pop(key, None)
            self.cache_bytes -= self.sizes.pop(key, 0)

    def trim_cache(self, max_entries: int, max_bytes: int) -> None:
        """Drop the oldest encodes beyond ``max_entries`` or ``max_bytes`` (caller holds ``lock``)."""
        for key in list(self.encodes):
            if len(self.encodes) <= max_entries and self.cache_bytes <= max_bytes:
                return
            self.drop_encodes([key])


class CaptureThreads:
    """Capture and supervision threads of :class:`agent.video.VideoHub` (its base class).

    Uses the hub's ``_feeds``, ``_stop``, ``_clock``, ``_wall``, ``_camera_factory``,
    ``_delay_s``, ``_delay_max_s``, ``_rng``, ``_max_stuck``, ``_probe_s`` and ``_idle_after_s``.
    """


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
        background_thread()
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
                self._idle_wait(feed, run)

    def _idle_wait(self, feed: _Feed, run: _Run) -> None:
        """While nobody watches ``feed``: drop its encodes, pause up to ``probe_period_s`` (a request wakes it)."""
        if self._probe_s is None or self._clock() < feed.watched_until:
            return
        if not feed.released:              # once per idle spell: the encodes, then the heap they used
            with feed.lock:
                feed.drop_encodes(list(feed.encodes))
            release_memory()
            feed.released = True
        end = self._clock() + self._probe_s
        while self._current(feed, run) and (left := end - self._clock()) > 0:
            feed.wake.clear()
            if self._clock() < feed.watched_until:
                return
            feed.wake.wait(min(left, 0.25))

    def _publish(self, feed: _Feed, image: np.ndarray, t_mono_s: float) -> None:
        image.flags.writeable = False
        t_unix_s = self._wall() - (self._clock() - t_mono_s)
        with feed.lock:
            feed.seq += 1
            frame = Frame(feed.cfg.id, feed.seq, t_mono_s, t_unix_s, image)
            feed.latest = frame
            waiters, feed.waiters = feed.waiters, []
            feed.drop_encodes([k for k in feed.encodes if k[0] < frame.seq - KEEP_FRAMES])
        if feed.health.state != OK:
            feed.health.recover()
        self._wake(waiters, frame)

    @staticmethod
    def _wake(waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future]], frame: Frame | None) -> None:
        """Resolve the waiters' futures with ``frame``: one wake-up per event loop, however many wait."""
        by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future]] = {}
        for loop, fut in waiters:
            by_loop.setdefault(loop, []).append(fut)
        for loop, futs in by_loop.items():
            try:
                loop.call_soon_threadsafe(_resolve, futs, frame)
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
