"""A driver from its config section: the one place that knows how each transport reaches a driver.

The driver class comes from the drivers' registry by the section's ``kind``
(drivers/registry.py); what it is handed depends on the section's declared
:attr:`drivers.section.DriverSection.transport`:

=========  ===========================================================================
serial     ``name`` and the URL openers (``port``: a path, a pyserial URL, ``sim://``)
gpio       ``name`` and the URL openers (``chip``)
i2c        the open bus (``bus``; one handle per bus, from :class:`Buses`) and ``name``
""         nothing: the driver opens its own source (a camera's ``source``)
=========  ===========================================================================

Used by the agent's devices (agent/devices/hardware.py), ``robot-agent selftest``
(agent/devices/selftest.py) and the driver test suites.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

from drivers.base import Device
from drivers.section import DriverSection
from drivers.i2c import bus_key, open_bus
from drivers.registry import driver_class
from drivers.transport import Openers

log = logging.getLogger(__name__)

__all__ = ["Buses", "build_driver"]


class Buses:
    """The URL openers and the I2C buses opened through them: one handle per bus (``1`` and
    ``/dev/i2c-1`` are one), opened on first use by a device, closed by :meth:`close`. Thread-safe.

    Args:
        openers: URL scheme -> opener per transport (``sim://``: the simulated tank's emulators).
    """

    def __init__(self, openers: Openers | None = None) -> None:
        self.openers = openers if openers is not None else Openers()
        self._lock = threading.Lock()
        self._open: dict[str, Any] = {}

    def check(self, name: str, dcfg: DriverSection) -> None:
        """Refuse a ``port``/``bus``/``chip`` URL whose scheme has no opener now, not at every reopen.

        Raises:
            DriverConfigError: naming the device, the URL and the schemes that would work.
        """
        if dcfg.transport:
            self.openers.check(dcfg.transport, dcfg.endpoint, name)

    def getter(self, value: int | str) -> Callable[[], Any]:
        """A function returning the open bus ``value`` names (opening it on first call)."""
        key = bus_key(value)

        def get() -> Any:
            with self._lock:
                if key not in self._open:
                    self._open[key] = open_bus(value, openers=self.openers)
                return self._open[key]
        return get

    def close(self) -> None:
        """Close every bus opened here. Idempotent; a failing close is logged."""
        with self._lock:
            opened, self._open = self._open, {}
        for key, bus in opened.items():
            try:
                bus.close()
            except OSError as err:
                log.warning("I2C bus %s: close failed: %s", key, err)


def build_driver(name: str, dcfg: DriverSection, buses: Buses, **options: Any) -> Device:
    """A new driver (not opened) for the config section ``dcfg``; see the module docstring.

    Args:
        name: the device's name in logs and health (``motor``, ``imu``...).
        dcfg: its config section. buses: the openers, and the I2C bus an ``i2c`` device is on
            (opened now when it is not yet).
        options: further keyword arguments the driver class takes (a test's clock, a capture factory).

    Raises:
        DriverError: the I2C bus could not be opened (OSError from the bus is the driver's to map).
    """
    klass = driver_class(dcfg)
    if dcfg.transport == "i2c":
        return klass(dcfg, buses.getter(dcfg.endpoint)(), name=name, **options)
    if dcfg.transport:
        return klass(dcfg, name=name, openers=buses.openers, **options)
    return klass(dcfg, **options)
