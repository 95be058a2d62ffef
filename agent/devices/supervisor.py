"""Supervision of one device: health, error accounting, reopen with backoff.

A :class:`Supervised` wraps one driver. Calls go through :meth:`Supervised.call`,
which never raises: a :class:`~drivers.errors.DriverError` marks the device
``degraded`` (the first errors) or ``lost`` (``lost_after`` consecutive errors,
or a closed/unplugged transport); the state lives in an
:class:`agent.devices.health.HealthTracker`, which logs each transition once (ERROR
going down, INFO on recovery, the Home Assistant coordinator pattern). A lost
device is closed, and reopened by the thread that serves it (agent/devices/worker.py, when
:meth:`Supervised.reopen_in` says it is due) after :func:`agent.support.ratelimit.backoff_s`
(jittered, capped, doubled per failed open) while the agent runs without it.
:class:`DriverGuard` is the one place a driver's exception other than DriverError (a bug)
becomes a DriverError.
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

T = TypeVar("T")

__all__ = ["DEGRADED", "LOST", "OK", "DriverBug", "DriverGuard", "Supervised"]


class DriverBug(DriverError):
    """A driver raised something other than DriverError (its ``__cause__``): a bug in the driver."""


class DriverGuard:
    """The one place where a driver raising something other than DriverError (a driver bug) is
    turned into a DriverError, so the caller's error accounting (health, reopen) handles it.

    The bug is logged at ERROR with its traceback, once per distinct error in a row (a driver
    failing the same way at every call or reopen logs it once).

    Args:
        device: the device's name in logs and in the DriverError (``motor``, ``camera.front``).
        logger: where the bug is logged.
    """

    def __init__(self, device: str, logger: logging.Logger = log) -> None:
        self.device = device
        self._log = logger
        self._last = ""

    def call(self, fn: Callable[[], T], what: str = "driver") -> T:
        """``fn()``; a DriverError passes through, any other exception is raised as
        ``DriverBug("unexpected <Type>: <message>")`` (a DriverError) after logging it (``what`` names the step:
        ``driver``, ``open``, ``capture``, ``gyro calibration``)."""
        try:
            result = fn()
        except DriverError:
            raise
        except Exception as err:  # noqa: BLE001 - a driver bug must not end the thread that called it
            error = f"unexpected {type(err).__name__}: {err}"
            if error != self._last:
                self._log.error("%s: %s raised %s instead of DriverError", self.device, what,
                                type(err).__name__, exc_info=True)
            self._last = error
            raise DriverBug(error, device=self.device) from err
        self._last = ""
        return result


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
        self._guard = DriverGuard(name)
        self._driver: D | None = None
        self._health = HealthTracker(name, log, last_error="not opened yet")
        self._consecutive = 0
        self._failed_opens = 0
        self.next_attempt = 0.0

    # ------------------------------------------------------------------ state
    @property
    def state(self) -> Health:
        """``ok`` | ``degraded`` | ``lost`` (a :class:`agent.devices.health.Health`, equal to its string)."""
        return self._health.state

    @property
    def driver(self) -> D | None:
        """The open driver, or None while lost."""
        return self._driver

    def reopen_in(self) -> float | None:
        """Seconds until the next reopen attempt is due (0.0: now), or None while not ``lost``."""
        if self._health.state != LOST:
            return None
        return max(0.0, self.next_attempt - self._clock())

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
                result = self._guard.call(lambda: fn(drv))
            except DriverError as err:
                self._fail(err)
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

    def _delay(self, attempt: int) -> float:
        return backoff_s(attempt, self._backoff0, self._backoff_max)

    # ------------------------------------------------------------------ open
    def try_open(self) -> bool:
        """Build and open a new driver; on failure schedule the next try. Blocking: the device's own thread."""
        made: list[D] = []

        def open_new() -> None:
            made.append(self._factory())
            made[0].open()
            if self._on_open is not None:
                self._on_open(made[0])
        try:
            self._guard.call(open_new, "open")
        except DriverError as err:
            drv = made[0] if made else None
            self._health.fail(LOST, str(err) or type(err).__name__)
            delay = self._delay(self._failed_opens)
            self._failed_opens += 1
            self.next_attempt = self._clock() + delay
            log.debug("%s: open failed (%s); next try in %.1f s", self.name, self._health.last_error, delay)
            if drv is not None:
                _close_quietly(drv, self.name)
            return False
        with self._lock:
            self._driver = made[0]
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
