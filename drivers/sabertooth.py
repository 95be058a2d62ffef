"""Dimension Engineering Sabertooth 2x12 / 2x25 / 2x32 in packetized serial mode.

Wire facts from hardware-reference §2 (Sabertooth 2x12 User's Guide, "Mode 4:
Packetized Serial Mode"; DE Arduino library v1.5):

- one-way link, host TX -> Sabertooth S1; the controller never answers, so a
  wrong address, baud or checksum is invisible to the host;
- packet ``address command data checksum``; address 128-135, every other byte
  0-127; checksum = (address + command + data) & 0x7F;
- original units detect the baud rate from a first byte 0xAA; V2 units ignore
  it harmlessly, so the driver sends it at ``open()`` when ``cfg.autobaud``
  and then waits ``cfg.autobaud_wait_s`` (the DE library waits 500 ms);
- cmd 14 sets the controller's own serial timeout in 100 ms units (0 = off,
  off at power-up, not kept across power cycles): sent at every ``open()``,
  rounded up to the next 100 ms as the DE library does.

Drive: cmds 0/1 (motor 1 forward/backward) and 4/5 (motor 2), data 0-127,
both packets in one write. **Full scale is 127**, the manual's "127 = full";
the DE library clamps its signed ``power`` to +-126 only to keep its API
symmetric with the 7-bit commands (64 +- 63), which would waste 1/127 of the
range here. Zero is sent as "forward 0".

``read_feedback()`` returns ``MotorFeedback()`` with every field None: the
device has no way to report anything. Channel mapping (``cfg.left_channel``)
and per-side inversion apply to duty.
"""

from __future__ import annotations

import logging
import math
import time
from typing import TYPE_CHECKING

from drivers.errors import DriverError
from drivers.base import MotorFeedback
from drivers.serialport import SerialFactory, SerialLink, SerialMotorController
from drivers.transport import Openers

if TYPE_CHECKING:
    from drivers.config import SabertoothConfig

log = logging.getLogger(__name__)

#: Autobaud byte, sent first after power-up on original units (§2.1).
AUTOBAUD = 0xAA
CMD_M1_FORWARD = 0
CMD_M1_BACKWARD = 1
CMD_MIN_VOLTAGE = 2
CMD_MAX_VOLTAGE = 3
CMD_M2_FORWARD = 4
CMD_M2_BACKWARD = 5
CMD_M1_7BIT = 6
CMD_M2_7BIT = 7
CMD_SERIAL_TIMEOUT = 14
CMD_BAUD = 15
CMD_RAMPING = 16
CMD_DEADBAND = 17
#: Data value of full speed.
FULL_SCALE = 127
#: Read timeout for the (never used) input side, s.
READ_TIMEOUT_S = 0.05


def checksum(address: int, cmd: int, data: int) -> int:
    """7-bit packet checksum: (address + command + data) & 0x7F (§2.2)."""
    return (address + cmd + data) & 0x7F


def packet(address: int, cmd: int, data: int) -> bytes:
    """One packet ``address command data checksum``.

    Raises:
        ValueError: address outside 128-135, or command / data outside 0-127.
    """
    if not 128 <= address <= 135:
        raise ValueError(f"Sabertooth address must be 128..135, got {address}")
    if not (0 <= cmd <= 127 and 0 <= data <= 127):
        raise ValueError(f"Sabertooth command and data must be 0..127, got {cmd}, {data}")
    return bytes((address, cmd, data, checksum(address, cmd, data)))


def motor_packet(address: int, motor: int, duty: float) -> bytes:
    """Drive packet for ``motor`` (1 or 2) at ``duty`` -1..1: cmd 0/1 or 4/5, data ``round(|duty| * 127)``.

    The duty was checked and clamped at the device edge (drivers/serialport.py ``track_duty``);
    :func:`packet` refuses data outside 0..127 (ValueError) rather than send it."""
    value = round(abs(duty) * FULL_SCALE)
    cmd = (CMD_M1_FORWARD if motor == 1 else CMD_M2_FORWARD) + (1 if duty < 0 and value else 0)
    return packet(address, cmd, value)


def timeout_value(seconds: float) -> int:
    """Serial timeout in cmd 14 units: 100 ms steps rounded up, 0-127 (DE library ``setTimeout``)."""
    return max(0, min(127, math.ceil(round(seconds * 10, 6))))


class Sabertooth(SerialMotorController):
    """Sabertooth in packetized serial, two tracks on motors 1/2. Write-only.

    Args:
        cfg: port, baud, address 128-135, serial_timeout_s, autobaud, autobaud_wait_s,
            left_channel, invert_left/right.
        serial_factory: returns an open ``serial.Serial``-like object; default
            ``serial_for_url(cfg.port, cfg.baud)`` 8N1 exclusive.
        name: configured device name, used in errors and logs.
        openers: URL scheme -> opener table for the default factory (``sim://`` ports;
            drivers/transport.py).
    """

    @classmethod
    def own_timeout_s(cls, cfg: SabertoothConfig) -> float:
        """The serial timeout set at open (command 14), s."""
        return cfg.serial_timeout_s

    def __init__(self, cfg: SabertoothConfig, *, serial_factory: SerialFactory | None = None,
                 name: str = "motor", openers: Openers | None = None) -> None:
        super().__init__(cfg, serial_factory=serial_factory, name=name, openers=openers, timeout_s=READ_TIMEOUT_S)
        self.cfg: SabertoothConfig = cfg

    def _handshake(self, link: SerialLink) -> None:
        if self.cfg.autobaud:
            link.write(bytes((AUTOBAUD,)))
            time.sleep(self.cfg.autobaud_wait_s)
        units = timeout_value(self.cfg.serial_timeout_s)
        link.write(self._packet(CMD_SERIAL_TIMEOUT, units))
        log.info("%s: Sabertooth at %d, serial timeout %.1f s (one-way link: not verifiable)",
                 self.name, self.cfg.address, units / 10)

    def _packet(self, cmd: int, data: int) -> bytes:
        try:
            return packet(self.cfg.address, cmd, data)
        except ValueError as err:
            raise DriverError(f"{self.name}: {err}", device=self.name) from err

    def _write_duty(self, link: SerialLink, left: float, right: float) -> None:
        m1, m2 = (left, right) if self.cfg.left_channel == 1 else (right, left)
        link.write(motor_packet(self.cfg.address, 1, m1) + motor_packet(self.cfg.address, 2, m2))

    def _read_feedback(self, link: SerialLink) -> MotorFeedback:
        return MotorFeedback()
