"""Supervision of one device: health, error accounting, reopen with backoff.

A :class:`Supervised` wraps one driver. Calls go through :meth:`Supervised.call`,
which never raises: a :class:`~drivers.errors.DriverError` marks the device
``degraded`` (the first errors) or ``lost`` (``lost_after`` consecutive errors,
or a closed/unplugged transport); the state lives in an
:class:`agent.devices.health.HealthTracker`, which logs each transition once (ERROR
going down, INFO on recovery, the Home Assistant coordinator pattern). A lost
device is closed and reopened by :class:`Reopener` after
:func:`agent.support.ratelimit.backoff_s` (jittered, capped, doubled per failed open)
while the agent runs without it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Generic, TypeVar

from agent.errors import DeviceClosed, DriverError
from agent.devices.health import DEGRADED, LOST, OK, Health, HealthTracker
from agent.model import DeviceHealth
from agent.support.ratelimit import backoff_s
from drivers.base import Device

log = logging.getLogger(__name__)

D = TypeVar("D", bound=Device)

__all__ = ["DEGRADED", "LOST", "OK", "Reopener", "Supervised"]


class Supervised(Generic[D]):
    """One device under supervision.

    Args:
        name: config name, e.g. ``motor``, ``imu``.
        factory: builds a new, not yet opened driver (transport included).
        lost_after: consecutive errors that turn ``degraded`` into ``lost``.
        on_open: called with the freshly opened driver (e.g. command zero), may raise DriverError.
        backoff_s / backoff_max_s: first and largest reopen delay, s (:func:`agent.support.ratelimit.backoff_s`).
    """

    def __init__(self, name: str, factory: Callable[[], D], *, lost_after: int = 3,
                 on_open: Callable[[D], None] | None = None,
                 backoff_s: float = 0.5, backoff_max_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self._factory = factory
        self._on_open = on_open
        self._lost_after = lost_after
        self._backoff0 = backoff_s
        self._backoff_max = backoff_max_s
        self._clock = clock
        self._lock = threading.Lock()
        self._driver: D | None = None
        self._health = HealthTracker(name, log, last_error="not opened yet")
        self._consecutive = 0
        self._failed_opens = 0
        self.next_attempt = 0.0
        #: called (under the call lock, must not block) when the device is declared lost: the reopen thread's wake-up
        self.on_lost: Callable[[], None] | None = None

    # ------------------------------------------------------------------ state
    @property
    def state(self) -> Health:
        """``ok`` | ``degraded`` | ``lost`` (a :class:`agent.devices.health.Health`, equal to its string)."""
        return self._health.state

    @property
    def driver(self) -> D | None:
        """The open driver, or None while lost."""
        return self._driver

    def health(self) -> DeviceHealth:
        """Name, state, last error (empty while ``ok``) and the error count since start."""
        return self._health.report()

    # ------------------------------------------------------------------ calls
    def call(self, fn: Callable[[D], Any], default: Any = None) -> Any:
        """Run ``fn(driver)``; on DriverError account for it and return ``default``. Never raises."""
        with self._lock:
            drv = self._driver
            if drv is None:
                return default
            try:
                result = fn(drv)
            except DriverError as err:
                self._fail(err)
                return default
            except Exception as err:  # noqa: BLE001 - a driver bug must not stop the control loop
                log.exception("%s: driver raised %s instead of DriverError", self.name, type(err).__name__)
                self._fail(DriverError(f"unexpected {type(err).__name__}: {err}", device=self.name))
                return default
            self._consecutive = 0
            if self._health.state != OK:
                self._health.recover()
            return result

    def _fail(self, err: DriverError) -> None:
        self._consecutive += 1
        error = str(err) or type(err).__name__
        if isinstance(err, DeviceClosed) or self._consecutive >= self._lost_after:
            self._health.fail(LOST, error)
            self._drop()
        else:
            self._health.fail(DEGRADED if self._health.state == OK else self._health.state, error)

    def _drop(self) -> None:
        drv, self._driver = self._driver, None
        self._failed_opens = 0
        self.next_attempt = self._clock() + self._delay(0)
        if drv is not None:
            _close_quietly(drv, self.name)
        if self.on_lost is not None:
            self.on_lost()

    def _delay(self, attempt: int) -> float:
        return backoff_s(attempt, self._backoff0, self._backoff_max)

    # ------------------------------------------------------------------ open
    def try_open(self) -> bool:
        """Build and open a new driver; on failure schedule the next try. Blocking: reopen thread only."""
        drv: D | None = None
        try:
            drv = self._factory()
            drv.open()
            if self._on_open is not None:
                self._on_open(drv)
        except Exception as err:  # noqa: BLE001 - DriverError expected; anything else is a driver bug
            if not isinstance(err, DriverError):
                log.exception("%s: open raised %s instead of DriverError", self.name, type(err).__name__)
            self._health.fail(LOST, str(err) or type(err).__name__)
            delay = self._delay(self._failed_opens)
            self._failed_opens += 1
            self.next_attempt = self._clock() + delay
            log.debug("%s: open failed (%s); next try in %.1f s", self.name, self._health.last_error, delay)
            if drv is not None:
                _close_quietly(drv, self.name)
            return False
        with self._lock:
            self._driver = drv
            self._consecutive = 0
            self._failed_opens = 0
            self._health.recover()
        return True

    def close(self) -> None:
        """Close the driver (it puts outputs in a safe state). Idempotent."""
        with self._lock:
            drv, self._driver = self._driver, None
            self._health.retire("closed")
        if drv is not None:
            _close_quietly(drv, self.name)


def _close_quietly(drv: Device, name: str) -> None:
    try:
        drv.close()
    except Exception as err:  # noqa: BLE001 - close() is documented never to raise; guard anyway
        log.warning("%s: close failed: %s", name, err)


class Reopener:
    """Background thread that reopens lost devices when their backoff expires.

    It sleeps until the earliest reopen attempt due, and while no device is lost until one is declared
    lost (``Supervised.on_lost`` wakes it): no periodic wake-ups on a healthy robot. ``period_s`` is the
    least time between two of its rounds."""

    def __init__(self, devices: list[Supervised], *, period_s: float = 0.1,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._devices = devices
        self._period = period_s
        self._clock = clock
        self._stop = threading.Event()
        self._wake = threading.Event()
        for dev in devices:
            dev.on_lost = self._wake.set
        self._thread = threading.Thread(target=self._run, name="reopen", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._period):
            self._wake.clear()          # a loss declared from here on wakes the next wait
            due: float | None = None
            for dev in self._devices:
                if self._stop.is_set():
                    return
                if dev.state == LOST and self._clock() >= dev.next_attempt:
                    dev.try_open()
                if dev.state == LOST:
                    wait = dev.next_attempt - self._clock()
                    due = wait if due is None else min(due, wait)
            if due is None or due > self._period:
                self._wake.wait(None if due is None else due - self._period)

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)
