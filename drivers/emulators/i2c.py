"""An I2C bus without hardware: smbus2's call signatures over emulated chips.

:class:`FakeSMBus` holds chip emulators by 7-bit address and turns every
smbus2 call into the bytes a real adapter would put on the wire: a write
transaction is ``[register, data...]``; a read is a register-pointer write
followed by a read of ``n`` bytes (repeated START), all one transaction.
Chips see only those bytes (``write(data)`` / ``read(n)``), so register
pointers, auto-increment and byte order are the chip's business, as on a real
bus. SMBus words are low byte first (hardware-reference §7.1).

Faults: an address with no chip, or a chip unplugged with :meth:`remove`,
raises ``OSError(121)`` (EREMOTEIO, NACK); :meth:`power_cycle` resets a chip to its power-on
values with no error at all (a supply brown-out); :meth:`inject` makes the next
``count`` transactions to an address raise ``OSError(errno)`` (121 NACK,
110 timeout, 5 EIO; hardware-reference §7.2). An address above 0x7F raises
EINVAL (22) as ``i2c-dev`` does; use after :meth:`close` raises EBADF (9).

Chip emulators (drivers/emulators/mpu6050.py, bno055.py, ina2xx.py,
pca9685.py) each have ``from_config(cfg, physics)``; :meth:`FakeSMBus.attach`
refuses a second chip at an occupied address. :class:`ManualClock` lets tests
and benchmarks drive drivers, chips and physics on one hand-advanced clock.

Thread-safe: one transaction at a time, like the kernel adapter lock. The thread CPU time
spent holding that lock (the emulation: chips, bookkeeping; not the wire-time sleep) is counted
in :attr:`FakeSMBus.emulation` and the process-wide ``drivers.emulators.cputime.TOTALS["i2c"]``
(scripts/bench_side.py shows it apart from the agent's device thread that runs it inline).
"""

from __future__ import annotations

import ctypes
import errno as errno_mod
import os
import time
from collections import deque
from dataclasses import dataclass
from typing import Iterable, Protocol

from drivers.emulators.cputime import I2C, TOTALS, CpuMeter, MeteredLock
from drivers.emulators.wire import i2c_transfer_s
from drivers.errors import DriverConfigError
from drivers.i2c import SMBUS_BLOCK_MAX

#: smbus2 ``i2c_msg.flags`` bit of a read message (linux/i2c.h I2C_M_RD).
I2C_M_RD = 0x0001
#: General-call address; data byte 0x06 is the software reset (PCA9685 §7.6).
GENERAL_CALL = 0x00
SOFTWARE_RESET = 0x06


class Chip(Protocol):
    """What a chip emulator implements: the bytes of one transaction, and power-on reset."""

    def write(self, data: bytes) -> None:
        """A write transaction's data bytes (first byte: register pointer, for register chips)."""

    def read(self, length: int) -> bytes:
        """The bytes the chip sends for a read of ``length`` bytes."""

    def reset(self) -> None:
        """Return to power-on values."""


class RegisterChip:
    """An 8-bit register file behind a register pointer (MPU-6050, BNO055, PCA9685).

    The first byte of a write sets the pointer; the following bytes are stored
    with auto-increment (:meth:`advance`). Reads start at the pointer.
    Subclasses set :attr:`POR` and override the hooks :meth:`store`,
    :meth:`load`, :meth:`latch` (refresh sampled data before a read) and
    :meth:`committed` (after a write transaction). Subclasses set their own
    attributes before calling ``super().__init__()``, which calls :meth:`reset`.
    """

    #: Power-on register values; every other register is 0.
    POR: dict[int, int] = {}
    #: Answers the general-call software reset (0x00, 0x06).
    GENERAL_CALL_RESET = False

    def __init__(self) -> None:
        self.regs = bytearray(256)
        self.pointer = 0
        self.reset()

    def reset(self) -> None:
        """Power-on values, pointer 0."""
        self.regs[:] = bytes(256)
        for reg, value in self.POR.items():
            self.regs[reg] = value
        self.pointer = 0

    def write(self, data: bytes) -> None:
        if not data:
            return
        self.pointer = data[0]
        for value in data[1:]:
            self.store(self.pointer, value)
            self.pointer = self.advance(self.pointer)
        self.committed()

    def read(self, length: int) -> bytes:
        self.latch(self.pointer, length)
        out = bytearray()
        for _ in range(length):
            out.append(self.load(self.pointer))
            self.pointer = self.advance(self.pointer)
        return bytes(out)

    # ------------------------------------------------------------------ hooks
    def advance(self, reg: int) -> int:
        """Register after ``reg`` in a multi-byte transfer (default: always increment, wrap at 0xFF)."""
        return (reg + 1) & 0xFF

    def store(self, reg: int, value: int) -> None:
        """A data byte written to ``reg``."""
        self.regs[reg] = value

    def load(self, reg: int) -> int:
        """The byte the chip returns for ``reg``."""
        return self.regs[reg]

    def latch(self, reg: int, length: int) -> None:
        """Called at the start of a read of ``length`` bytes from ``reg``."""

    def committed(self) -> None:
        """Called at the end of a write transaction."""


@dataclass(frozen=True, slots=True)
class Transaction:
    """One bus transaction as the fake saw it.

    Attributes:
        address: 7-bit address.
        op: ``write`` | ``read`` | ``fault`` (injected error) | ``nack`` (nobody answered).
        data: bytes written (register pointer first) or bytes returned.
        error: errno raised, or None.
    """

    address: int
    op: str
    data: bytes
    error: int | None = None


def _os_error(code: int) -> OSError:
    return OSError(code, os.strerror(code))


class FakeSMBus:
    """smbus2.SMBus stand-in over chip emulators held by address.

    Args:
        chips: address -> chip emulator.
        label: the config value this bus stands for (``sim://``); used by the probe.
        history: most transactions kept in :attr:`log` (oldest dropped; each one is an object the
            garbage collector walks while it lives: the simulated tank's bus is read ~100 times a second).
        read_last_only: ``i2c_rdwr`` fails with EOPNOTSUPP (95) when a read
            message is not the last one, like the Pi's ``i2c-bcm2835`` (§7.1).
        clock_hz: bus clock; each transaction then holds the bus for its wire time
            (drivers/emulators/wire.py, ``i2c_transfer_s``). None: no pacing.

    Attributes:
        emulation: thread CPU time, s, spent in this bus's transactions and test controls (its
            chips' emulation included, its wire-time sleeps not); a drivers.emulators.cputime.CpuMeter.
    """

    def __init__(self, chips: dict[int, Chip] | None = None, *, label: str = "sim://",
                 history: int = 64, read_last_only: bool = True, clock_hz: float | None = None) -> None:
        self.label = label
        self.clock_hz = clock_hz
        self.read_last_only = read_last_only
        self._chips: dict[int, Chip] = {}
        self._removed: set[int] = set()
        self._faults: dict[int, list[int]] = {}
        self.emulation = CpuMeter(TOTALS[I2C])
        self._lock = MeteredLock(self.emulation)
        self.log: deque[Transaction] = deque(maxlen=history)
        self.transactions: dict[int, int] = {}
        self.closed = False
        for address, chip in (chips or {}).items():
            self.attach(address, chip)

    # ------------------------------------------------------------------ test controls
    def attach(self, address: int, chip: Chip) -> Chip:
        """Put ``chip`` on the bus at ``address``; returns it.

        Raises:
            DriverConfigError: ``address`` is not 0x01..0x7F, or another chip already answers
                there (INA2xx and PCA9685 both default to 0x40: give one another address).
        """
        if not 0x01 <= address <= 0x7F:
            raise DriverConfigError(f"I2C address 0x{address:02x} is not a 7-bit device address")
        with self._lock:
            if address in self._chips:
                raise DriverConfigError(f"{type(chip).__name__} at 0x{address:02x} on {self.label} collides with "
                                  f"{type(self._chips[address]).__name__}: give one of them another address",
                                  [("$.drivers", f"two devices at 0x{address:02x} on bus {self.label}")])
            self._chips[address] = chip
            self._removed.discard(address)
        return chip

    def chip(self, address: int) -> Chip:
        """The chip at ``address`` (KeyError if none)."""
        return self._chips[address]

    def addresses(self) -> list[int]:
        """Addresses that currently answer."""
        with self._lock:
            return sorted(a for a in self._chips if a not in self._removed)

    def inject(self, address: int, errno: int, count: int = 1) -> None:
        """Raise ``OSError(errno)`` on the next ``count`` transactions to ``address``."""
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        with self._lock:
            self._faults[address] = [errno, count]

    def remove(self, address: int) -> None:
        """Unplug the chip at ``address``: it NACKs (121) until :meth:`restore`."""
        with self._lock:
            self._removed.add(address)

    def restore(self, address: int, *, power_cycle: bool = False) -> None:
        """Plug the chip back in; with ``power_cycle`` it comes back with power-on values."""
        with self._lock:
            self._removed.discard(address)
            if power_cycle and address in self._chips:
                self._chips[address].reset()

    def power_cycle(self, address: int) -> None:
        """Cut and restore the power of the chip at ``address`` between two transactions with no bus
        error (a brown-out of its supply): its registers go back to their power-on values (its
        ``reset()``). KeyError when no chip is attached there."""
        with self._lock:
            self._chips[address].reset()

    def writes(self, address: int) -> list[bytes]:
        """Write payloads sent to ``address`` still in :attr:`log`, oldest first."""
        return [t.data for t in self.log if t.address == address and t.op == "write" and t.error is None]

    # ------------------------------------------------------------------ plumbing
    def _target(self, address: int) -> Chip:
        """Lock held. The chip that ACKs ``address``, or the OSError the adapter would raise."""
        if self.closed:
            raise _os_error(errno_mod.EBADF)
        if not isinstance(address, int) or not 0 <= address <= 0x7F:
            raise _os_error(errno_mod.EINVAL)
        self.transactions[address] = self.transactions.get(address, 0) + 1
        fault = self._faults.get(address)
        if fault and fault[1] > 0:
            fault[1] -= 1
            self.log.append(Transaction(address, "fault", b"", fault[0]))
            raise _os_error(fault[0])
        chip = self._chips.get(address)
        if chip is None or address in self._removed:
            self.log.append(Transaction(address, "nack", b"", errno_mod.EREMOTEIO))
            raise _os_error(errno_mod.EREMOTEIO)
        return chip

    def _write(self, address: int, data: Iterable[int]) -> None:
        payload = bytes(int(b) & 0xFF for b in data)
        with self._lock:
            if address == GENERAL_CALL:
                self._general_call(payload)
                return
            self._target(address).write(payload)
            self.log.append(Transaction(address, "write", payload))
            self._hold(len(payload) - 1, read=False)

    def _write_read(self, address: int, register: int, length: int) -> bytes:
        with self._lock:
            chip = self._target(address)
            chip.write(bytes([register & 0xFF]))
            data = chip.read(length)
            self.log.append(Transaction(address, "write", bytes([register & 0xFF])))
            self.log.append(Transaction(address, "read", data))
            self._hold(length, read=True)
            return data

    def _hold(self, data_bytes: int, *, read: bool) -> None:
        """Lock held: keep the bus for the transaction's wire time at :attr:`clock_hz` (if set); the
        sleep is waiting, not emulation: the lock's meter stops around it."""
        if self.clock_hz:
            self._lock.pause()
            time.sleep(i2c_transfer_s(max(0, data_bytes), self.clock_hz, read=read))
            self._lock.resume()

    def _general_call(self, payload: bytes) -> None:
        """Lock held. General call: software reset (0x06) of every chip that supports it."""
        if self.closed:
            raise _os_error(errno_mod.EBADF)
        takers = [c for a, c in self._chips.items()
                  if a not in self._removed and getattr(c, "GENERAL_CALL_RESET", False)]
        if not takers:
            raise _os_error(errno_mod.EREMOTEIO)
        if payload == bytes([SOFTWARE_RESET]):
            for chip in takers:
                chip.reset()
        self.log.append(Transaction(GENERAL_CALL, "write", payload))

    # ------------------------------------------------------------------ smbus2 API
    def write_quick(self, i2c_addr: int, force: bool | None = None) -> None:
        """Address-only transaction (what i2cdetect -q uses)."""
        with self._lock:
            self._target(i2c_addr)

    def read_byte(self, i2c_addr: int, force: bool | None = None) -> int:
        """Read one byte at the chip's current pointer."""
        with self._lock:
            data = self._target(i2c_addr).read(1)
            self.log.append(Transaction(i2c_addr, "read", data))
            return data[0]

    def write_byte(self, i2c_addr: int, value: int, force: bool | None = None) -> None:
        """Write one byte (sets the register pointer of register chips)."""
        self._write(i2c_addr, [value])

    def read_byte_data(self, i2c_addr: int, register: int, force: bool | None = None) -> int:
        """Pointer write then one byte read."""
        return self._write_read(i2c_addr, register, 1)[0]

    def write_byte_data(self, i2c_addr: int, register: int, value: int, force: bool | None = None) -> None:
        """Write ``[register, value]``."""
        self._write(i2c_addr, [register, value])

    def read_word_data(self, i2c_addr: int, register: int, force: bool | None = None) -> int:
        """SMBus word: the first byte on the wire is the low byte."""
        data = self._write_read(i2c_addr, register, 2)
        return data[0] | (data[1] << 8)

    def write_word_data(self, i2c_addr: int, register: int, value: int, force: bool | None = None) -> None:
        """SMBus word: the low byte goes first on the wire."""
        self._write(i2c_addr, [register, value & 0xFF, (value >> 8) & 0xFF])

    def read_i2c_block_data(self, i2c_addr: int, register: int, length: int,
                            force: bool | None = None) -> list[int]:
        """Pointer write then ``length`` (<= 32) bytes read; ValueError above 32 like smbus2."""
        if length > SMBUS_BLOCK_MAX:
            raise ValueError(f"Desired block length over {SMBUS_BLOCK_MAX} bytes")
        return list(self._write_read(i2c_addr, register, length))

    def write_i2c_block_data(self, i2c_addr: int, register: int, data: list[int],
                             force: bool | None = None) -> None:
        """Write ``[register, *data]`` (<= 32 data bytes; ValueError above, like smbus2)."""
        if len(data) > SMBUS_BLOCK_MAX:
            raise ValueError(f"Data length cannot exceed {SMBUS_BLOCK_MAX} bytes")
        self._write(i2c_addr, [register, *data])

    def i2c_rdwr(self, *i2c_msgs) -> None:
        """Combined transfer of ``smbus2.i2c_msg`` messages (read messages are filled in place)."""
        if self.read_last_only and any(m.flags & I2C_M_RD for m in i2c_msgs[:-1]):
            raise _os_error(errno_mod.EOPNOTSUPP)
        with self._lock:
            moved = 0
            for msg in i2c_msgs:
                chip = self._target(msg.addr)
                if msg.flags & I2C_M_RD:
                    data = chip.read(msg.len)
                    ctypes.memmove(msg.buf, data, msg.len)
                    self.log.append(Transaction(msg.addr, "read", data))
                else:
                    payload = bytes(msg)
                    chip.write(payload)
                    self.log.append(Transaction(msg.addr, "write", payload))
                moved += msg.len
            reads = any(m.flags & I2C_M_RD for m in i2c_msgs)
            self._hold(moved - 1, read=reads)       # the first byte written is the register

    def close(self) -> None:
        """Close the bus; later calls raise EBADF."""
        self.closed = True

    def __enter__(self) -> "FakeSMBus":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ManualClock:
    """A monotonic clock advanced by hand, for deterministic tests and benchmarks.

    Call it for the time (s); pass :meth:`sleep` where a driver sleeps, so a
    driver's waits advance the emulators' and the physics' time instead of
    blocking.
    """

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def sleep(self, dt: float) -> None:
        """Advance by ``dt`` seconds (negative values are ignored)."""
        self.t += max(0.0, dt)
