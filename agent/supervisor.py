"""Supervision of one device: health state, error accounting, reopen with backoff.

A :class:`Supervised` wraps one driver. Calls go through :meth:`Supervised.call`,
which never raises: a :class:`~agent.errors.DriverError` marks the device
``degraded`` (the first errors) or ``lost`` (``lost_after`` consecutive errors,
or a closed/unplugged transport), each transition logged once (ERROR going
down, INFO on recovery, the Home Assistant coordinator pattern). A lost device
is closed and reopened by :class:`Reopener` with jittered, capped backoff while
the agent runs without it.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Any, Callable, Generic, TypeVar

from agent.errors import DeviceClosed, DriverError
from agent.model import DeviceHealth
from drivers.base import Device

log = logging.getLogger(__name__)

D = TypeVar("D", bound=Device)

OK, DEGRADED, LOST = "ok", "degraded", "lost"


class Supervised(Generic[D]):
    """One device under supervision.

    Args:
        name: config name, e.g. ``motor``, ``imu``.
        factory: builds a new, not yet opened driver (transport included).
        lost_after: consecutive errors that turn ``degraded`` into ``lost``.
        on_open: called with the freshly opened driver (e.g. command zero), may raise DriverError.
        backoff_s / backoff_max_s: first and largest reopen delay, s (jittered +-25 %).
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
        self._state = LOST
        self._last_error = "not opened yet"
        self._errors = 0
        self._consecutive = 0
        self._backoff = backoff_s
        self.next_attempt = 0.0

    # ------------------------------------------------------------------ state
    @property
    def state(self) -> str:
        """``ok`` | ``degraded`` | ``lost``."""
        return self._state

    @property
    def driver(self) -> D | None:
        """The open driver, or None while lost."""
        return self._driver

    def health(self) -> DeviceHealth:
        """Name, state, last error (empty while ``ok``) and the error count since start."""
        return DeviceHealth(self.name, self._state, "" if self._state == OK else self._last_error, self._errors)

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
            if self._consecutive or self._state != OK:
                self._consecutive = 0
                if self._state != OK:
                    log.info("%s: recovered", self.name)
                    self._state = OK
            return result

    def _fail(self, err: DriverError) -> None:
        self._errors += 1
        self._consecutive += 1
        self._last_error = str(err) or type(err).__name__
        fatal = isinstance(err, DeviceClosed) or self._consecutive >= self._lost_after
        if fatal:
            log.error("%s: lost (%s); reopening in the background", self.name, self._last_error)
            self._drop()
        elif self._state == OK:
            log.warning("%s: degraded (%s)", self.name, self._last_error)
            self._state = DEGRADED

    def _drop(self) -> None:
        drv, self._driver = self._driver, None
        self._state = LOST
        self._backoff = self._backoff0
        self.next_attempt = self._clock() + self._jitter(self._backoff)
        if drv is not None:
            _close_quietly(drv, self.name)

    def _jitter(self, delay: float) -> float:
        return delay * random.uniform(0.75, 1.25)

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
            self._last_error = str(err) or type(err).__name__
            self._errors += 1
            self.next_attempt = self._clock() + self._jitter(self._backoff)
            self._backoff = min(self._backoff * 2, self._backoff_max)
            log.debug("%s: open failed (%s); next try in %.1f s", self.name, self._last_error, self._backoff)
            if drv is not None:
                _close_quietly(drv, self.name)
            return False
        with self._lock:
            was_lost_once = self._errors > 0
            self._driver = drv
            self._state = OK
            self._consecutive = 0
            self._backoff = self._backoff0
        if was_lost_once:
            log.info("%s: open again", self.name)
        else:
            log.info("%s: open", self.name)
        return True

    def close(self) -> None:
        """Close the driver (it puts outputs in a safe state). Idempotent."""
        with self._lock:
            drv, self._driver = self._driver, None
            self._state = LOST
            self._last_error = "closed"
        if drv is not None:
            _close_quietly(drv, self.name)


def _close_quietly(drv: Device, name: str) -> None:
    try:
        drv.close()
    except Exception as err:  # noqa: BLE001 - close() is documented never to raise; guard anyway
        log.warning("%s: close failed: %s", name, err)


class Reopener:
    """Background thread that reopens lost devices when their backoff expires."""

    def __init__(self, devices: list[Supervised], *, period_s: float = 0.1,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._devices = devices
        self._period = period_s
        self._clock = clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="reopen", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._period):
            now = self._clock()
            for dev in self._devices:
                if self._stop.is_set():
                    return
                if dev.state == LOST and now >= dev.next_attempt:
                    dev.try_open()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)
