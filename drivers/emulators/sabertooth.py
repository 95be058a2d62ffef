"""Sabertooth packetized-serial emulator on a pty pair (hardware-reference §2).

Receive-only, as the device: it never writes to the link. Packets are
``address command data checksum`` with the address >= 128 and every other byte
<= 127, so the parser resynchronises on the next byte >= 128 after garbage.
A packet with a wrong checksum or another address is ignored.

- ``autobaud=True`` models original units (2x5, 2x10, 2x25 v1): nothing is
  obeyed until a 0xAA byte has arrived; V2 units (the default) ignore 0xAA.
- cmd 14 sets its own serial timeout (100 ms units, 0 = off, off at power-on):
  with no valid packet for that long both motors stop.
- Drive commands 0/1/4/5 (0-127 = 0..100 %) and 6/7 (7-bit, 64 = stop); the
  mixed-mode commands 8-13 are recorded and counted but not modelled.
  Settings 2, 3, 15, 16, 17 are accepted and kept in :attr:`settings`.

Motors 1/2 drive the tank physics' left/right tracks by ``left_channel``.
Losing the link does not power the controller off: only its timeout stops it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from drivers import sabertooth as st
from drivers.emulators.pty import PtySerialDevice
from drivers.emulators.tank import TankPhysics

if TYPE_CHECKING:
    from drivers.config import SabertoothConfig

log = logging.getLogger(__name__)

SETTINGS = frozenset({st.CMD_MIN_VOLTAGE, st.CMD_MAX_VOLTAGE, st.CMD_BAUD, st.CMD_RAMPING, st.CMD_DEADBAND})


class SabertoothEmulator(PtySerialDevice):
    """An emulated Sabertooth served on a pty.

    Args:
        physics: the tank whose tracks motors 1/2 drive; a private one when None.
        address: packet address it obeys, 128-135.
        left_channel: which motor (1 or 2) drives the left track.
        autobaud: require the 0xAA byte before obeying anything (original units).
        serial_timeout_s: serial timeout at power-on, s (0 = off, the default).
        link, record: see :class:`PtySerialDevice`.
    """

    def __init__(self, physics: TankPhysics | None = None, *, address: int = 128, left_channel: int = 1,
                 autobaud: bool = False, serial_timeout_s: float = 0.0, link: str | None = None,
                 record: int = 64) -> None:
        super().__init__(physics, link=link, record=record)
        if not 128 <= address <= 135:
            raise ValueError(f"address must be 128..135, got {address}")
        if left_channel not in (1, 2):
            raise ValueError(f"left_channel must be 1 or 2, got {left_channel}")
        self.address = address
        self.left_channel = left_channel
        self.needs_autobaud = autobaud
        self.bauded = False
        self.timeout_s = serial_timeout_s
        self.motor_duty = [0.0, 0.0]   # motor 1, motor 2, -1..1
        self.settings: dict[int, int] = {}
        self._buf = bytearray()
        self._last_valid = 0.0

    @classmethod
    def from_config(cls, cfg: SabertoothConfig, physics: TankPhysics | None = None,
                    **options) -> SabertoothEmulator:
        """The emulator a driver with ``cfg`` expects (address, channel wiring; a V2 unit)."""
        kw = {"address": cfg.address, "left_channel": cfg.left_channel}
        kw.update(options)
        return cls(physics, **kw)

    def _apply(self, m1: float, m2: float) -> None:
        self.motor_duty = [m1, m2]
        self.physics.set_duty(*((m1, m2) if self.left_channel == 1 else (m2, m1)))

    def _on_power_on(self, now: float) -> None:
        self._last_valid = now

    def _on_time(self, now: float) -> float | None:
        if self.timeout_s > 0 and any(self.motor_duty):
            if now - self._last_valid >= self.timeout_s:
                log.debug("Sabertooth %d: serial timeout %.1f s, motors stopped", self.address, self.timeout_s)
                self.stats["timeouts"] += 1
                self._apply(0.0, 0.0)
            else:
                return self._last_valid + self.timeout_s
        return None

    def _on_bytes(self, data: bytes, now: float) -> None:
        for byte in data:
            if byte >= 128:  # an address or the autobaud byte starts something new
                if self._buf:
                    self._record(bytes(self._buf))
                    self.stats["partial"] += 1
                self._buf = bytearray((byte,))
                if byte == st.AUTOBAUD:
                    self._record(bytes(self._buf))
                    self._buf = bytearray()
                    self.bauded = True
            elif not self._buf:
                self.stats["noise"] += 1
            else:
                self._buf.append(byte)
                if len(self._buf) == 4:
                    self._packet(bytes(self._buf), now)
                    self._buf = bytearray()

    def _packet(self, pkt: bytes, now: float) -> None:
        addr, cmd, data, chk = pkt
        self._record(pkt)
        if chk != st.checksum(addr, cmd, data):
            self.stats["bad_checksum"] += 1
        elif addr != self.address:
            self.stats["other_address"] += 1
        elif self.needs_autobaud and not self.bauded:
            self.stats["not_bauded"] += 1
        else:
            self.stats["packets"] += 1
            self._last_valid = now
            self._command(cmd, data)

    def _command(self, cmd: int, data: int) -> None:
        m = list(self.motor_duty)
        if cmd in (st.CMD_M1_FORWARD, st.CMD_M1_BACKWARD, st.CMD_M2_FORWARD, st.CMD_M2_BACKWARD):
            m[cmd // 4] = (-data if cmd & 1 else data) / st.FULL_SCALE
        elif cmd in (st.CMD_M1_7BIT, st.CMD_M2_7BIT):
            m[cmd - st.CMD_M1_7BIT] = max(-1.0, (data - 64) / 63)
        elif cmd == st.CMD_SERIAL_TIMEOUT:
            self.timeout_s = data / 10
            return
        elif cmd in SETTINGS:
            self.settings[cmd] = data
            return
        else:
            self.stats["unmodelled"] += 1
            return
        self._apply(m[0], m[1])
