"""RoboClaw packet-serial emulator on a pty pair (hardware-reference §1, §1.8).

Behaves as the controller does on the wire:

- answers only packets addressed to its own address; stays silent on a bad
  CRC, a wrong address or an unknown command (the rest of the input is then
  dropped: without the command the packet length is unknown);
- drops a partial packet when more than 10 ms pass between its bytes;
- acks a valid write with ``0xFF``; a read reply carries the CRC over the
  request's address and command plus the reply data;
- its own serial timeout (cmd 14, 100 ms units, 0 = off, off at power-on):
  with no valid packet addressed to it for that long both motors go to zero
  (reads count as valid packets: the manual says "valid serial command");
- a settable status word (cmd 90, 2 or 4 bytes); while the E-Stop bit of that
  width is set the motors are held at zero and drive commands are acked but
  not applied.

Motors M1/M2 drive the tank physics' left/right tracks by ``left_channel``.
Encoders, speeds, battery and currents come from the physics; encoder
counts go on the wire as the low 32 bits of the running total. Losing the link
(unplug) does not power the controller off: only its serial timeout stops it.

Supported commands: 0, 1, 4, 5, 6, 7 (compatibility drive), 14/15 (serial
timeout), 16-19 (encoders, speeds), 20 (reset encoders), 21 (version), 24/25
(batteries), 32-34 (signed duty), 35-37 (signed speed, QPPS), 48 (PWMs),
49 (currents), 78/79 (both encoders, both speeds), 82 (temperature), 90 (status).
"""

from __future__ import annotations

import logging
import struct
from typing import TYPE_CHECKING

from drivers import roboclaw as rc
from drivers.emulators.pty import PtySerialDevice
from drivers.emulators.tank import TankPhysics

if TYPE_CHECKING:
    from drivers.config import RoboclawConfig

log = logging.getLogger(__name__)

#: Data bytes of each write command after ``addr cmd`` (the CRC follows).
WRITE_DATA_BYTES = {
    rc.CMD_M1_FORWARD: 1, rc.CMD_M1_BACKWARD: 1, rc.CMD_M2_FORWARD: 1, rc.CMD_M2_BACKWARD: 1,
    rc.CMD_M1_7BIT: 1, rc.CMD_M2_7BIT: 1, rc.CMD_SET_TIMEOUT: 1, rc.CMD_RESET_ENCODERS: 0,
    rc.CMD_DUTY_M1: 2, rc.CMD_DUTY_M2: 2, rc.CMD_DUTY_M1M2: 4,
    rc.CMD_SPEED_M1: 4, rc.CMD_SPEED_M2: 4, rc.CMD_SPEED_M1M2: 8,
}
READ_COMMANDS = frozenset({
    rc.CMD_READ_TIMEOUT, rc.CMD_READ_ENC_M1, rc.CMD_READ_ENC_M2, rc.CMD_READ_SPEED_M1, rc.CMD_READ_SPEED_M2,
    rc.CMD_READ_VERSION, rc.CMD_READ_MAIN_BATTERY, rc.CMD_READ_LOGIC_BATTERY, rc.CMD_READ_PWMS,
    rc.CMD_READ_CURRENTS, rc.CMD_READ_TEMPERATURE, rc.CMD_READ_STATUS, rc.CMD_READ_ENCODERS, rc.CMD_READ_ISPEEDS,
})
#: Inter-byte gap after which a partial packet is discarded, s (§1.1).
PACKET_GAP_S = 0.010
#: Request -> reply turnaround, s. ⚠ Not documented (hardware-reference §1 gives none); 1 ms assumed.
REPLY_LATENCY_S = 0.001


class RoboclawEmulator(PtySerialDevice):
    """An emulated RoboClaw served on a pty.

    Args:
        physics: the tank whose tracks M1/M2 drive; a private one when None.
        address: packet-serial address it answers, 0x80-0x87.
        status_bytes: width of the cmd 90 reply, 2 (older firmware) or 4.
        left_channel: which motor channel (1 or 2) drives the left track.
        serial_timeout_s: serial timeout at power-on, s (0 = off, the controller's default).
        version: the cmd 21 string.
        qpps: encoder counts/s at full duty, for the speed commands; from the physics when None.
        battery_v: fixed main battery voltage, V; from the physics when None.
        logic_battery_v: logic battery voltage, V. temperature_c: board temperature, degC.
        link, record: see :class:`PtySerialDevice`.
    """

    def __init__(self, physics: TankPhysics | None = None, *, address: int = 0x80, status_bytes: int = 4,
                 left_channel: int = 1, serial_timeout_s: float = 0.0, version: str = "RoboClaw 2x15a v4.2.8",
                 qpps: float | None = None, battery_v: float | None = None, logic_battery_v: float = 5.0,
                 temperature_c: float = 25.0, link: str | None = None, record: int = 64) -> None:
        super().__init__(physics, link=link, record=record)
        if not 0x80 <= address <= 0x87:
            raise ValueError(f"address must be 0x80..0x87, got {address:#x}")
        if status_bytes not in (2, 4):
            raise ValueError(f"status_bytes must be 2 or 4, got {status_bytes}")
        if left_channel not in (1, 2):
            raise ValueError(f"left_channel must be 1 or 2, got {left_channel}")
        if len(version.encode("ascii")) > rc.VERSION_MAX_BYTES - 2:
            raise ValueError(f"version is longer than {rc.VERSION_MAX_BYTES - 2} characters")
        self.address = address
        self.status_bytes = status_bytes
        self.left_channel = left_channel
        self.version = version
        p = self.physics.params
        self.qpps = qpps if qpps is not None else p.max_speed_mps * p.counts_per_m
        self.battery_v = battery_v
        self.logic_battery_v = logic_battery_v
        self.temperature_c = temperature_c
        self.timeout_s = serial_timeout_s
        self.status = 0
        self.motor_duty = [0.0, 0.0]   # M1, M2, -1..1
        self._enc_offset = [0, 0]      # M1, M2 counts subtracted from the physics totals
        self._buf = bytearray()
        self._last_rx = 0.0
        self._last_valid = 0.0

    @classmethod
    def from_config(cls, cfg: RoboclawConfig, physics: TankPhysics | None = None, **options) -> RoboclawEmulator:
        """The emulator a driver with ``cfg`` expects (address, status width, channel wiring)."""
        kw = {"address": cfg.address, "status_bytes": cfg.status_bytes, "left_channel": cfg.left_channel}
        kw.update(options)
        emu = cls(physics, **kw)
        emu.pace(cfg.baud, REPLY_LATENCY_S)   # 8N1 at the configured baud (hardware-reference §1.1)
        return emu

    # ------------------------------------------------------------------ test API
    def set_status(self, status: int) -> None:
        """Set the cmd 90 status word (e.g. 0x0001 E-Stop on 4-byte firmware, 0x0004 on 2-byte)."""
        if not 0 <= status < 1 << (8 * self.status_bytes):
            raise ValueError(f"status 0x{status:X} does not fit {self.status_bytes} bytes")
        with self._lock:
            self.status = status
            if self.estopped:
                self._apply((0.0, 0.0))
            self._wake()

    @property
    def estopped(self) -> bool:
        """True while the status word carries the E-Stop bit of its width."""
        return bool(self.status & rc.ESTOP_BIT[self.status_bytes])

    def set_encoder_counts(self, m1: int | None = None, m2: int | None = None) -> None:
        """Make the M1 / M2 counters read ``m1`` / ``m2`` now (the physics keeps integrating from there)."""
        with self._lock:
            totals = self._raw_counts()
            for i, value in enumerate((m1, m2)):
                if value is not None:
                    self._enc_offset[i] = totals[i] - value

    def encoder_counts(self) -> tuple[int, int]:
        """M1, M2 counters as running totals (before the 32-bit wire wrap)."""
        with self._lock:
            totals = self._raw_counts()
            return totals[0] - self._enc_offset[0], totals[1] - self._enc_offset[1]

    # ------------------------------------------------------------------ model
    def _tracks(self, m1, m2):
        """(M1, M2) -> (left, right) by ``left_channel``; being a swap, also (left, right) -> (M1, M2)."""
        return (m1, m2) if self.left_channel == 1 else (m2, m1)

    def _raw_counts(self) -> tuple[int, int]:
        return self._tracks(*self.physics.encoder_counts())

    def _apply(self, duty: tuple[float, float]) -> None:
        if self.estopped:
            duty = (0.0, 0.0)
        self.motor_duty = [max(-1.0, min(1.0, d)) for d in duty]
        self.physics.set_duty(*self._tracks(*self.motor_duty))

    def _on_time(self, now: float) -> float | None:
        due = []
        if self._buf:
            if now - self._last_rx >= PACKET_GAP_S:
                self._drop_partial()
            else:
                due.append(self._last_rx + PACKET_GAP_S)
        if self.timeout_s > 0 and any(self.motor_duty):
            if now - self._last_valid >= self.timeout_s:
                log.debug("RoboClaw 0x%02X: serial timeout %.1f s, motors stopped", self.address, self.timeout_s)
                self.stats["timeouts"] += 1
                self._apply((0.0, 0.0))
            else:
                due.append(self._last_valid + self.timeout_s)
        return min(due) if due else None

    def _on_power_on(self, now: float) -> None:
        self._last_valid = now

    def _drop_partial(self) -> None:
        self._record(bytes(self._buf))
        self.stats["partial"] += 1
        self._buf.clear()

    # ------------------------------------------------------------------ parser
    def _on_bytes(self, data: bytes, now: float) -> None:
        if self._buf and now - self._last_rx >= PACKET_GAP_S:
            self._drop_partial()
        self._last_rx = now
        self._buf += data
        while self._buf and self._parse_one(now):
            pass

    def _parse_one(self, now: float) -> bool:
        """Consume one packet from the buffer if complete; False when more bytes are needed."""
        buf = self._buf
        if not 0x80 <= buf[0] <= 0x87:
            self.stats["noise"] += 1
            del buf[0]
            return True
        if len(buf) < 2:
            return False
        addr, cmd = buf[0], buf[1]
        if cmd in READ_COMMANDS:
            packet = bytes(buf[:2])
        elif cmd in WRITE_DATA_BYTES:
            size = 4 + WRITE_DATA_BYTES[cmd]
            if len(buf) < size:
                return False
            packet = bytes(buf[:size])
        else:
            self._record(bytes(buf))
            self.stats["unknown_command"] += 1
            buf.clear()
            return False
        del buf[:len(packet)]
        self._record(packet)
        if cmd not in READ_COMMANDS and rc.crc16(packet[:-2]) != int.from_bytes(packet[-2:], "big"):
            self.stats["bad_crc"] += 1
            return True
        if addr != self.address:
            self.stats["other_address"] += 1
            return True
        self._last_valid = now
        self.stats["packets"] += 1
        if cmd in READ_COMMANDS:
            self._send(rc.with_crc(packet + self._read_data(cmd))[2:])
        else:
            self._write_command(cmd, packet[2:-2], now)
            self._send(bytes((rc.ACK,)))
        return True

    def _write_command(self, cmd: int, data: bytes, now: float) -> None:
        m = list(self.motor_duty)
        if cmd in (rc.CMD_M1_FORWARD, rc.CMD_M1_BACKWARD, rc.CMD_M2_FORWARD, rc.CMD_M2_BACKWARD):
            value = min(data[0], 127) / 127
            m[cmd // 4] = -value if cmd & 1 else value
        elif cmd in (rc.CMD_M1_7BIT, rc.CMD_M2_7BIT):
            m[cmd - rc.CMD_M1_7BIT] = (min(data[0], 127) - 64) / 63
        elif cmd in (rc.CMD_DUTY_M1, rc.CMD_DUTY_M2, rc.CMD_DUTY_M1M2):
            values = struct.unpack(f">{len(data) // 2}h", data)
            channels = (0, 1) if cmd == rc.CMD_DUTY_M1M2 else (cmd - rc.CMD_DUTY_M1,)
            for ch, v in zip(channels, values, strict=True):
                m[ch] = v / rc.DUTY_FULL_SCALE
        elif cmd in (rc.CMD_SPEED_M1, rc.CMD_SPEED_M2, rc.CMD_SPEED_M1M2):
            values = struct.unpack(f">{len(data) // 4}i", data)
            channels = (0, 1) if cmd == rc.CMD_SPEED_M1M2 else (cmd - rc.CMD_SPEED_M1,)
            for ch, v in zip(channels, values, strict=True):
                m[ch] = v / self.qpps
        elif cmd == rc.CMD_SET_TIMEOUT:
            self.timeout_s = data[0] / 10
            return
        elif cmd == rc.CMD_RESET_ENCODERS:
            self.set_encoder_counts(0, 0)
            return
        self._apply((m[0], m[1]))

    def _read_data(self, cmd: int) -> bytes:
        if cmd in (rc.CMD_READ_ENC_M1, rc.CMD_READ_ENC_M2):
            ch = cmd - rc.CMD_READ_ENC_M1
            speed = self._tracks(*self.physics.encoder_cps())[ch]
            return struct.pack(">IB", self.encoder_counts()[ch] & 0xFFFFFFFF, 0x02 if speed < 0 else 0x00)
        if cmd == rc.CMD_READ_ENCODERS:
            return struct.pack(">II", *(c & 0xFFFFFFFF for c in self.encoder_counts()))
        if cmd == rc.CMD_READ_ISPEEDS:
            return struct.pack(">ii", *(round(v) for v in self._tracks(*self.physics.encoder_cps())))
        if cmd in (rc.CMD_READ_SPEED_M1, rc.CMD_READ_SPEED_M2):
            speed = self._tracks(*self.physics.encoder_cps())[cmd - rc.CMD_READ_SPEED_M1]
            return struct.pack(">iB", round(speed), 0x01 if speed < 0 else 0x00)
        if cmd == rc.CMD_READ_MAIN_BATTERY:
            volts = self.battery_v if self.battery_v is not None else self.physics.battery_voltage_v()
            return struct.pack(">H", max(0, round(volts * 10)))
        if cmd == rc.CMD_READ_LOGIC_BATTERY:
            return struct.pack(">H", round(self.logic_battery_v * 10))
        if cmd == rc.CMD_READ_CURRENTS:
            amps = self._tracks(*self.physics.motor_current_a())
            return struct.pack(">hh", *(round(a * 100) for a in amps))
        if cmd == rc.CMD_READ_PWMS:
            return struct.pack(">hh", *(rc.duty_value(d) for d in self.motor_duty))
        if cmd == rc.CMD_READ_STATUS:
            return self.status.to_bytes(self.status_bytes, "big")
        if cmd == rc.CMD_READ_TIMEOUT:
            return bytes((round(self.timeout_s * 10),))
        if cmd == rc.CMD_READ_TEMPERATURE:
            return struct.pack(">H", round(self.temperature_c * 10))
        return self.version.encode("ascii") + b"\n\x00"  # CMD_READ_VERSION
