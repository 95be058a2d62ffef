"""The drivers' exception tree; it depends on nothing outside the standard library.

Every driver raises :class:`DriverError` or a subclass, wrapping the cause
with ``raise ... from err`` (pyserial, smbus2 ``OSError``, OpenCV). The classes
also inherit the matching builtin, so callers catching ``OSError``,
``TimeoutError`` or ``ValueError`` keep working. ``agent.errors`` re-exports
them unchanged.
"""

from __future__ import annotations


class DriverError(OSError):
    """A device driver failed.

    Attributes:
        device: configured device name (``motor``, ``imu``...).
        errno: OS errno when the cause was an ``OSError`` (121 NACK, 110 timeout, 5 EIO...).
        status: device status word when the device itself reported the fault.
    """

    def __init__(self, message: str, device: str = "", errno: int | None = None,
                 status: int | None = None) -> None:
        super().__init__(message)
        self.device = device
        self.errno = errno
        self.status = status

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class DeviceClosed(DriverError):
    """The driver was used after ``close()``."""


class DeviceTimeout(DriverError, TimeoutError):
    """The device did not answer in time (missing ack, short read)."""


class ChecksumError(DriverError):
    """A reply failed its CRC / checksum."""


class DriverConfigError(DriverError, ValueError):
    """A driver or transport was given a value it cannot use (bus form, URL scheme, chemistry, address)."""


class DeviceReset(DriverError):
    """The device had lost the setup its driver wrote at open (a power cycle or brown-out with no bus
    error: its registers back at their power-on values); the driver has set it up again, its last
    commanded outputs included. Raised so the caller counts and logs the event."""
