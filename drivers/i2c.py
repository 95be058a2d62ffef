"""Shared I2C plumbing for the smbus2-based drivers.

- :func:`open_bus` turns a config ``bus`` value into an smbus2-like object:
  a bus number (``1`` -> ``/dev/i2c-1``), a device path, or a URL served by a
  registered opener (``sim://``, drivers/transport.py); :func:`bus_key` names a bus once.
- :func:`swap16`, :func:`to_s16`: SMBus word reads are little-endian on the
  wire (low byte first, hardware-reference §7.1); MPU-6050 and INA2xx
  registers are big-endian, so words are byte-swapped at this edge.
- :class:`I2cDevice`: one chip at one address on a bus. Every ``OSError`` from
  the bus becomes :class:`drivers.errors.DriverError` with the errno kept (121
  NACK, 110 timeout, 5 bus error; hardware-reference §7.2); using it after
  ``close()`` raises :class:`drivers.errors.DeviceClosed`.

Drivers never close the bus object: several chips share one bus, and its
owner (agent/devices/hardware.py) closes it.
"""

from __future__ import annotations

import logging
from typing import Callable, Protocol

import smbus2

from drivers.errors import DeviceClosed, DriverConfigError, DriverError
from drivers.transport import Openers, bus_key  # noqa: F401 - bus_key re-exported

log = logging.getLogger(__name__)

#: Largest register-addressed block smbus2 transfers (I2C_SMBUS_BLOCK_MAX).
SMBUS_BLOCK_MAX = 32


class SMBusLike(Protocol):
    """The part of ``smbus2.SMBus`` the drivers use."""

    def read_byte_data(self, i2c_addr: int, register: int, force: bool | None = None) -> int: ...
    def write_byte_data(self, i2c_addr: int, register: int, value: int, force: bool | None = None) -> None: ...
    def read_word_data(self, i2c_addr: int, register: int, force: bool | None = None) -> int: ...
    def write_word_data(self, i2c_addr: int, register: int, value: int, force: bool | None = None) -> None: ...
    def read_i2c_block_data(self, i2c_addr: int, register: int, length: int,
                            force: bool | None = None) -> list[int]: ...
    def write_i2c_block_data(self, i2c_addr: int, register: int, data: list[int],
                             force: bool | None = None) -> None: ...
    def i2c_rdwr(self, *i2c_msgs: smbus2.i2c_msg) -> None: ...
    def close(self) -> None: ...


def open_bus(value: int | str, *, openers: Openers | None = None) -> SMBusLike:
    """Open the I2C bus a config ``bus`` value names.

    Args:
        value: bus number (``1`` -> ``/dev/i2c-1``), a digit string (``"1"``),
            a device path (``"/dev/i2c-1"``), or a URL whose scheme has an ``i2c``
            opener in ``openers`` (``"sim://"``: the simulated tank's bus).
        openers: URL scheme -> opener table (drivers/transport.py).

    Returns:
        An ``smbus2.SMBus`` (or what the opener returns); the caller closes it.

    Raises:
        DriverConfigError: the value is no bus form we know, or a URL without an opener.
        DriverError: opening the device failed, errno kept (2: no such bus, is
            ``dtparam=i2c_arm=on`` set? 13: user not in group ``i2c``).
    """
    opener = openers.opener("i2c", value) if openers is not None and isinstance(value, str) else None
    if opener is not None:
        return opener(value)
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise DriverConfigError(f"I2C bus must be a number or a path, got {value!r}")
    if isinstance(value, int) and value < 0:
        raise DriverConfigError(f"I2C bus number must be >= 0, got {value}")
    if isinstance(value, str):
        (openers or Openers()).check("i2c", value)
        if not value.startswith("/"):
            raise DriverConfigError(f"I2C bus {value!r}: expected a number, an absolute /dev/i2c-N path or a URL")
    try:
        return smbus2.SMBus(value)
    except OSError as err:
        raise DriverError(f"cannot open I2C bus {value!r}: {err.strerror or err}", errno=err.errno) from err


def swap16(word: int) -> int:
    """Swap the two bytes of a 16-bit word (SMBus LE word <-> BE register)."""
    return ((word & 0xFF) << 8) | ((word >> 8) & 0xFF)


def to_s16(value: int) -> int:
    """Interpret a 16-bit unsigned value as two's-complement signed."""
    value &= 0xFFFF
    return value - 0x10000 if value & 0x8000 else value


class I2cDevice:
    """One chip at one address on a shared bus, with errno-keeping error wrapping.

    Args:
        bus: smbus2-like bus object (shared; never closed here).
        address: 7-bit address.
        device: config name for errors (``imu``, ``power``, ``servo``).
        chip: chip name for errors (``MPU-6050``).
    """

    def __init__(self, bus: SMBusLike, address: int, *, device: str, chip: str) -> None:
        self.bus = bus
        self.address = address
        self.device = device
        self.chip = chip
        self.ready = False
        self.closed = False
        self._streams: dict[tuple[int, int], tuple[smbus2.i2c_msg, smbus2.i2c_msg]] = {}

    def __repr__(self) -> str:
        return f"{self.chip} '{self.device}' at 0x{self.address:02x}"

    # ------------------------------------------------------------------ lifecycle
    def check_usable(self) -> None:
        """Raise DeviceClosed after close()."""
        if self.closed:
            raise DeviceClosed(f"{self}: used after close()", device=self.device)

    def require_ready(self) -> None:
        """Raise DeviceClosed after close(), DriverError before a successful open()."""
        self.check_usable()
        if not self.ready:
            raise DriverError(f"{self}: not open (call open() first)", device=self.device)

    def close(self) -> None:
        """Mark the chip closed; the bus stays open. Idempotent."""
        self.ready = False
        self.closed = True

    def error(self, message: str, *, status: int | None = None) -> DriverError:
        """A DriverError about this chip (for device-reported faults)."""
        return DriverError(f"{self}: {message}", device=self.device, status=status)

    def _call(self, what: str, what_args: tuple, fn: Callable, *args):
        """``fn(address, *args)``; an OSError becomes a DriverError naming ``what % what_args`` (the
        text is made only then: a bus thread makes ~60 transactions a second)."""
        if self.closed:
            self.check_usable()
        try:
            return fn(self.address, *args)
        except OSError as err:
            raise DriverError(f"{self}: {what % what_args} failed: [errno {err.errno}] {err.strerror or err}",
                              device=self.device, errno=err.errno) from err

    # ------------------------------------------------------------------ 8-bit registers
    def read_u8(self, reg: int) -> int:
        """Read one byte register."""
        return self._call("read reg 0x%02x", (reg,), self.bus.read_byte_data, reg)

    def write_u8(self, reg: int, value: int) -> None:
        """Write one byte register."""
        self._call("write reg 0x%02x=0x%02x", (reg, value), self.bus.write_byte_data, reg, value & 0xFF)

    def read_block(self, reg: int, length: int) -> bytes:
        """Read ``length`` (<= 32) bytes starting at ``reg`` in one transaction."""
        data = self._call("read %d bytes at 0x%02x", (length, reg), self.bus.read_i2c_block_data, reg, length)
        if len(data) != length:
            raise DriverError(f"{self}: short read at 0x{reg:02x}: {len(data)} of {length} bytes",
                              device=self.device)
        return bytes(data)

    def read_stream(self, reg: int, length: int) -> bytes:
        """Read ``length`` bytes from ``reg`` in one combined transaction (I2C_RDWR: register write,
        repeated start, read), past SMBus's 32-byte block limit (a FIFO's contents)."""
        msgs = self._streams.get((reg, length))
        if msgs is None:        # made once per register and length (a FIFO read is 1-16 samples long)
            msgs = self._streams[(reg, length)] = (smbus2.i2c_msg.write(self.address, [reg]),
                                                   smbus2.i2c_msg.read(self.address, length))
        write, read = msgs
        self._call("read %d bytes at 0x%02x", (length, reg), lambda _address: self.bus.i2c_rdwr(write, read))
        data = bytes(read)
        if len(data) != length:
            raise DriverError(f"{self}: short read at 0x{reg:02x}: {len(data)} of {length} bytes",
                              device=self.device)
        return data

    def write_block(self, reg: int, data: bytes | list[int]) -> None:
        """Write ``data`` (<= 32 bytes) starting at ``reg`` in one transaction."""
        self._call("write %d bytes at 0x%02x", (len(data), reg), self.bus.write_i2c_block_data, reg, list(data))

    # ------------------------------------------------------------------ 16-bit BE registers
    def read_u16_be(self, reg: int) -> int:
        """Read a big-endian 16-bit register (SMBus word read, bytes swapped)."""
        return swap16(self._call("read word 0x%02x", (reg,), self.bus.read_word_data, reg))

    def write_u16_be(self, reg: int, value: int) -> None:
        """Write a big-endian 16-bit register (SMBus word write, bytes swapped)."""
        self._call("write word 0x%02x=0x%04x", (reg, value & 0xFFFF), self.bus.write_word_data, reg,
                   swap16(value & 0xFFFF))
