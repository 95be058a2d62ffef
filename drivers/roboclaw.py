"""Basicmicro RoboClaw two-channel motor controller in packet serial mode.

Wire facts from hardware-reference §1 (RoboClaw Series User Manual, "Packet
Serial", "Advanced Packet Serial", "Encoder Commands", "Advanced Motor Control"):

- write: ``addr cmd data... crc_hi crc_lo``, answered by one ``0xFF`` byte; an
  invalid packet gets no answer at all;
- read: ``addr cmd``, answered by ``data... crc_hi crc_lo`` where the CRC covers
  the address and command sent plus the reply data;
- CRC-16/XMODEM (poly 0x1021, init 0, MSB first), every multi-byte field big-endian;
- more than 10 ms between bytes of a packet and the controller drops it.

What the driver sends: at ``open()`` cmd 21 (firmware version, proves the
controller answers at this address and baud) and cmd 14 (the controller's own
serial timeout from ``cfg.serial_timeout_s``, in 100 ms units: with no valid
packet for that long the controller stops both motors by itself);
``set_duty`` is cmd 34 (signed duty of both channels in one packet, +-32767 =
+-100 %); ``set_speed_cps`` is cmd 37 (signed encoder counts/s, needs the
controller's velocity PID tuned); ``read_feedback`` reads cmd 78 (both encoder
counters) and 79 (both speeds) every time, and one of the slow fields in turn
(``SLOW_READS``: 24 main battery, 0.1 V; 49 both currents, 10 mA; 90 status
word, 2 or 4 bytes per ``cfg.status_bytes``), so each slow field is at most
three sets old; the first set after ``open()`` reads all five. ⚠ Cmds 78/79 are
not in hardware-reference §1.4: they are from the RoboClaw user manual ("Read
Encoder Counters": Enc1, Enc2 as 4-byte values; "Read ISpeeds Counters":
ISpeed1, ISpeed2, signed counts/s measured over the last 1/300 s, so noisier
than cmds 18/19's).

Line time (8N1, the emulator's assumed 1 ms reply latency; docs/hardware.md
"Motor line rate"): a set is 3 transactions, ~11 ms at 38400 baud and ~5.7 ms
at 115200 (5 and ~17 / ~9 ms before the slow fields took turns). A new duty
waits behind at most the transaction in progress; the longest is cmd 78/79
(2 + 10 bytes: 4.1 ms at 38400, 2.0 ms at 115200), the duty write itself
(8 + 1 bytes) 3.3 / 1.8 ms. Per-motor reads (cmds 16-19, 2 + 7 bytes each)
would cap it at the duty write's length but add two transactions per set: at
115200 that saved no measurable p99 and kept the line busier
(scripts/bench_latency_stages.py), so the combined reads stay.

Interpretation choices (hardware-reference appendix, open points 3-4):

- encoder counts are read as **signed** int32, as the legacy ``roboclaw_3.py``
  does: a running total that crosses zero going backward reads -1, not
  4294967295; totals wrap at +-2^31 counts;
- speeds (cmd 79) are signed int32 counts/s;
- currents are sign-extended int16 as the current ``basicmicro_python`` does.

Strict acks: a write is accepted only when the answer is exactly ``0xFF``. A
missing answer (DeviceTimeout), a bad reply CRC or a wrong ack byte
(ChecksumError) is retried twice after a 12 ms pause and an input flush, then
raised. Late replies: a reply that comes after its read timed out (a slow device, a
loaded machine) lands after the next transaction's input flush, in front of that
transaction's answer (a RoboClaw answers in order). Its bytes are skipped, never
read as the answer: a byte before the ack that is not ``0xFF`` (a read reply's
``0x00`` was taken for a wrong ack), a window before a read reply whose CRC does
not check (the next windows, one byte on, as more bytes arrive); at most
``LATE_BYTES_MAX`` of them, each waited for at most one reply timeout. Channel mapping (``cfg.left_channel``) and per-side inversion apply to
duty, speed, encoder counts and speeds, so the caller only sees tracks.
"""

from __future__ import annotations

import logging
import struct
from typing import TYPE_CHECKING

from drivers.errors import ChecksumError, DeviceTimeout, DriverError
from drivers.base import MotorFeedback
from drivers.serialport import SerialFactory, SerialLink, SerialMotorController, transfer_s
from drivers.transport import Openers

if TYPE_CHECKING:
    from drivers.config import RoboclawConfig

log = logging.getLogger(__name__)

# Command numbers (hardware-reference §1.4).
CMD_M1_FORWARD = 0
CMD_M1_BACKWARD = 1
CMD_M2_FORWARD = 4
CMD_M2_BACKWARD = 5
CMD_M1_7BIT = 6
CMD_M2_7BIT = 7
CMD_SET_TIMEOUT = 14
CMD_READ_TIMEOUT = 15
CMD_READ_ENC_M1 = 16
CMD_READ_ENC_M2 = 17
CMD_READ_SPEED_M1 = 18
CMD_READ_SPEED_M2 = 19
CMD_RESET_ENCODERS = 20
CMD_READ_VERSION = 21
CMD_READ_MAIN_BATTERY = 24
CMD_READ_LOGIC_BATTERY = 25
CMD_DUTY_M1 = 32
CMD_DUTY_M2 = 33
CMD_DUTY_M1M2 = 34
CMD_SPEED_M1 = 35
CMD_SPEED_M2 = 36
CMD_SPEED_M1M2 = 37
CMD_READ_PWMS = 48
CMD_READ_CURRENTS = 49
CMD_READ_TEMPERATURE = 82
CMD_READ_ENCODERS = 78
CMD_READ_ISPEEDS = 79
CMD_READ_STATUS = 90

#: Full-scale signed duty (+-100 %), as the current library documents (§1.4 cmd 32).
DUTY_FULL_SCALE = 32767
#: Acknowledgement of a valid write packet.
ACK = 0xFF
#: Longest firmware version string: up to 48 bytes including the LF and NUL terminators (§1.4 cmd 21).
VERSION_MAX_BYTES = 48
#: Longest reply the driver reads (version string + CRC), bytes.
MAX_REPLY_BYTES = VERSION_MAX_BYTES + 2

#: Most bytes of late replies skipped in front of one answer: those of a whole failed transaction
#: (three attempts of the longest reply).
LATE_BYTES_MAX = 3 * MAX_REPLY_BYTES

#: The slow part of a feedback set: main battery, currents, status. One of them is read per set, in
#: turn (each refreshed every ``len(SLOW_READS)`` sets); the first set after ``open()`` reads all.
SLOW_READS = (CMD_READ_MAIN_BATTERY, CMD_READ_CURRENTS, CMD_READ_STATUS)
#: Data bytes of the slow reads' replies (the status word's width is ``cfg.status_bytes``).
SLOW_READ_BYTES = {CMD_READ_MAIN_BATTERY: 2, CMD_READ_CURRENTS: 4}

#: Status bits, 32-bit word of current Basicmicro firmware (§1.5).
STATUS_BITS_32: dict[int, str] = {
    0x0001: "E-Stop", 0x0002: "Temperature error", 0x0004: "Temperature 2 error",
    0x0008: "Main voltage high error", 0x0010: "Logic voltage high error", 0x0020: "Logic voltage low error",
    0x0040: "M1 driver fault error", 0x0080: "M2 driver fault error", 0x0100: "M1 speed error",
    0x0200: "M2 speed error", 0x0400: "M1 position error", 0x0800: "M2 position error",
    0x1000: "M1 current error", 0x2000: "M2 current error",
    0x010000: "M1 over-current warning", 0x020000: "M2 over-current warning",
    0x040000: "Main voltage high warning", 0x080000: "Main voltage low warning",
    0x100000: "Temperature warning", 0x200000: "Temperature 2 warning",
    0x400000: "S4 signal triggered", 0x800000: "S5 signal triggered",
    0x01000000: "Speed error limit warning", 0x02000000: "Position error limit warning",
}
#: Status bits, 16-bit word of older Ion Motion Control firmware (§1.5).
STATUS_BITS_16: dict[int, str] = {
    0x0001: "M1 over-current warning", 0x0002: "M2 over-current warning", 0x0004: "E-Stop",
    0x0008: "Temperature error", 0x0010: "Temperature 2 error", 0x0020: "Main battery high error",
    0x0040: "Logic battery high error", 0x0080: "Logic battery low error", 0x0100: "M1 driver fault",
    0x0200: "M2 driver fault", 0x0400: "Main battery high warning", 0x0800: "Main battery low warning",
    0x1000: "Temperature warning", 0x2000: "Temperature 2 warning", 0x4000: "M1 home", 0x8000: "M2 home",
}
#: The E-Stop bit per status width.
ESTOP_BIT = {2: 0x0004, 4: 0x0001}


def _crc_table() -> tuple[int, ...]:
    table = []
    for i in range(256):
        crc = i << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
        table.append(crc & 0xFFFF)
    return tuple(table)


_CRC_TABLE = _crc_table()


def crc16(data: bytes) -> int:
    """CRC-16/XMODEM of ``data`` (poly 0x1021, init 0, no reflection; check "123456789" -> 0x31C3), §1.3."""
    crc = 0
    for byte in data:
        crc = ((crc << 8) & 0xFFFF) ^ _CRC_TABLE[((crc >> 8) ^ byte) & 0xFF]
    return crc


def with_crc(data: bytes) -> bytes:
    """``data`` followed by its CRC16, high byte first."""
    return data + crc16(data).to_bytes(2, "big")


def write_packet(address: int, cmd: int, data: bytes = b"") -> bytes:
    """A write packet: ``addr cmd data crc_hi crc_lo`` (§1.2)."""
    return with_crc(bytes((address, cmd)) + data)


def duty_value(duty: float) -> int:
    """Duty -1..1 as the signed 16-bit value of cmds 32-34 (+-32767 full scale). The duty was
    checked and clamped at the device edge (drivers/serialport.py ``track_duty``); a value
    outside -1..1 makes ``struct.pack(">h")`` fail rather than send a wrapped byte."""
    return round(duty * DUTY_FULL_SCALE)


def timeout_value(seconds: float) -> int:
    """Serial timeout in cmd 14 units (100 ms, 0-255): ``round(seconds * 10)`` as the official library."""
    return max(0, min(255, round(seconds * 10)))


def status_names(status: int, width: int) -> tuple[str, ...]:
    """Names of the bits set in a cmd 90 status word of ``width`` bytes (2 or 4); unknown bits as ``bit N``."""
    table = STATUS_BITS_32 if width == 4 else STATUS_BITS_16
    names = []
    for bit in range(width * 8):
        mask = 1 << bit
        if status & mask:
            names.append(table.get(mask, f"bit {bit}"))
    return tuple(names)


class Roboclaw(SerialMotorController):
    """RoboClaw in packet serial mode, two tracks on M1/M2.

    Args:
        cfg: port, baud, address 0x80-0x87, serial_timeout_s, status_bytes,
            left_channel, invert_left/right, reply_timeout_s.
        serial_factory: returns an open ``serial.Serial``-like object; default
            ``serial_for_url(cfg.port, cfg.baud)`` 8N1 exclusive.
        name: configured device name, used in errors and logs.
        openers: URL scheme -> opener table for the default factory (``sim://`` ports;
            drivers/transport.py).

    Attributes:
        version: firmware version string read at ``open()`` (e.g. ``"RoboClaw 10.2A v4.1.11"``).
    """

    @classmethod
    def own_timeout_s(cls, cfg: RoboclawConfig) -> float:
        """The serial timeout set at open (command 14), s."""
        return cfg.serial_timeout_s

    @classmethod
    def feedback_hz(cls, cfg: RoboclawConfig) -> float:
        """``cfg.feedback_hz``, Hz."""
        return cfg.feedback_hz

    def __init__(self, cfg: RoboclawConfig, *, serial_factory: SerialFactory | None = None,
                 name: str = "motor", openers: Openers | None = None) -> None:
        super().__init__(cfg, serial_factory=serial_factory, name=name, openers=openers,
                         timeout_s=cfg.reply_timeout_s + transfer_s(MAX_REPLY_BYTES, cfg.baud))
        self.cfg: RoboclawConfig = cfg
        self.version = ""
        self._slow: dict[int, bytes] = {}     # cmd -> data bytes of the last slow read (SLOW_READS)
        self._slow_turn = 0

    # ------------------------------------------------------------------ protocol
    def _handshake(self, link: SerialLink) -> None:
        self._slow.clear()      # a fresh link reads the whole set first
        self._slow_turn = 0
        link.flush_input()
        self.version = self._read_version(link)
        self._write(link, CMD_SET_TIMEOUT, bytes((timeout_value(self.cfg.serial_timeout_s),)))
        log.info("%s: RoboClaw %r at 0x%02X, serial timeout %.1f s", self.name, self.version,
                 self.cfg.address, timeout_value(self.cfg.serial_timeout_s) / 10)

    def _channels(self, left: float, right: float) -> tuple[float, float]:
        """Per-track values -> (M1, M2) by ``cfg.left_channel``."""
        return (left, right) if self.cfg.left_channel == 1 else (right, left)

    def _write_duty(self, link: SerialLink, left: float, right: float) -> None:
        m1, m2 = self._channels(left, right)
        self._write(link, CMD_DUTY_M1M2, struct.pack(">hh", duty_value(m1), duty_value(m2)))

    def set_speed_cps(self, left_cps: float, right_cps: float) -> None:
        """Closed-loop track speed, encoder counts/s (+ forward), cmd 37; needs the velocity PID tuned.

        Raises:
            DriverError: a speed is not finite or beyond int32, or the transfer failed.
        """
        values = []
        for side, cps in (("left", left_cps), ("right", right_cps)):
            if isinstance(cps, bool) or not isinstance(cps, (int, float)) or not abs(cps) < 2**31 - 1:
                log.error("%s: set_speed_cps %s speed %r is not a finite int32; nothing sent", self.name, side, cps)
                raise DriverError(f"{self.name}: {side} speed must be a finite count rate within int32, got {cps!r}",
                                  device=self.name)
            values.append(self.side_sign(side) * round(cps))
        m1, m2 = self._channels(values[0], values[1])
        with self._lock:
            self._write(self._require_link(), CMD_SPEED_M1M2, struct.pack(">ii", int(m1), int(m2)))

    def _read_feedback(self, link: SerialLink) -> MotorFeedback:
        enc = struct.unpack(">ii", self._read(link, CMD_READ_ENCODERS, 8))
        speeds = struct.unpack(">ii", self._read(link, CMD_READ_ISPEEDS, 8))
        slow = self._slow
        due = SLOW_READS
        if len(slow) == len(SLOW_READS):
            due = (SLOW_READS[self._slow_turn],)
            self._slow_turn = (self._slow_turn + 1) % len(SLOW_READS)
        for cmd in due:
            slow[cmd] = self._read(link, cmd, SLOW_READ_BYTES.get(cmd, self.cfg.status_bytes))
        (battery,) = struct.unpack(">H", slow[CMD_READ_MAIN_BATTERY])
        currents = struct.unpack(">hh", slow[CMD_READ_CURRENTS])
        width = self.cfg.status_bytes
        status = int.from_bytes(slow[CMD_READ_STATUS], "big")
        left_counts, right_counts = self._channels(*enc)
        left_cps, right_cps = self._channels(*speeds)
        left_a, right_a = self._channels(currents[0] / 100.0, currents[1] / 100.0)
        sl, sr = self.side_sign("left"), self.side_sign("right")
        return MotorFeedback(
            left_counts=sl * left_counts, right_counts=sr * right_counts,
            left_cps=float(sl * left_cps), right_cps=float(sr * right_cps),
            battery_v=battery / 10.0, left_a=left_a, right_a=right_a,
            status=status, status_text=status_names(status, width))

    def read_version(self) -> str:
        """Firmware version string (cmd 21). Raises DriverError."""
        with self._lock:
            self.version = self._read_version(self._require_link())
            return self.version

    # ------------------------------------------------------------------ transactions
    def _write(self, link: SerialLink, cmd: int, data: bytes = b"") -> None:
        """Send a write packet and check for the 0xFF ack, with retries."""
        packet = write_packet(self.cfg.address, cmd, data)

        def attempt() -> None:
            link.flush_input()
            link.write(packet)
            wrong = None        # the first byte that was not the ack (a late reply's, or a wrong ack)
            for _ in range(LATE_BYTES_MAX + 1):
                got = link.read(1)
                if not got:
                    break
                if got[0] == ACK:
                    return
                wrong = got[0] if wrong is None else wrong
            if wrong is None:
                raise DeviceTimeout(f"{self.name}: no ack from RoboClaw 0x{self.cfg.address:02X} to command {cmd}",
                                    device=self.name)
            raise ChecksumError(f"{self.name}: RoboClaw acked command {cmd} with 0x{wrong:02X}, expected 0xFF",
                                device=self.name)

        self._retrying(link, f"command {cmd}", attempt)

    def _read(self, link: SerialLink, cmd: int, n: int) -> bytes:
        """Send a read request and return the ``n`` data bytes of a reply whose CRC checks, with retries."""
        request = bytes((self.cfg.address, cmd))

        def attempt() -> bytes:
            link.flush_input()
            link.write(request)
            reply = link.read(n + 2)
            if len(reply) < n + 2:
                raise DeviceTimeout(f"{self.name}: RoboClaw 0x{self.cfg.address:02X} sent {len(reply)} of "
                                    f"{n + 2} bytes for read command {cmd}", device=self.name)
            return self._aligned(link, request, reply, cmd)

        return self._retrying(link, f"read {cmd}", attempt)

    def _aligned(self, link: SerialLink, request: bytes, reply: bytes, cmd: int) -> bytes:
        """The data of ``reply`` when its CRC checks; else late bytes may have come first: the window
        slides one byte per byte that arrives next (up to LATE_BYTES_MAX, each waited for one reply
        timeout) until its CRC checks. None does: the first window's ChecksumError."""
        try:
            return self._checked(request, reply, cmd)
        except ChecksumError as err:
            first = err
        window = bytearray(reply)
        for _ in range(LATE_BYTES_MAX):
            more = link.read(1)
            if not more:
                break
            del window[0]
            window += more
            data, got = bytes(window[:-2]), int.from_bytes(window[-2:], "big")
            if crc16(request + data) == got:
                log.debug("%s: skipped late bytes before the reply to command %d", self.name, cmd)
                return data
        raise first

    def _read_version(self, link: SerialLink) -> str:
        request = bytes((self.cfg.address, CMD_READ_VERSION))

        def attempt() -> str:
            link.flush_input()
            link.write(request)
            text = link.read_until(b"\n\x00", VERSION_MAX_BYTES)
            crc = link.read(2) if text.endswith(b"\n\x00") else b""
            if len(crc) < 2:
                raise DeviceTimeout(f"{self.name}: no complete version reply from RoboClaw at "
                                    f"0x{self.cfg.address:02X} (got {len(text) + len(crc)} bytes)", device=self.name)
            data = self._checked(request, text + crc, CMD_READ_VERSION)
            return data[:-2].decode("ascii", "replace").strip()

        return self._retrying(link, "read version", attempt)

    def _checked(self, request: bytes, reply: bytes, cmd: int) -> bytes:
        data, got = reply[:-2], int.from_bytes(reply[-2:], "big")
        want = crc16(request + data)
        if got != want:
            raise ChecksumError(f"{self.name}: RoboClaw reply to command {cmd} has CRC 0x{got:04X}, "
                                f"expected 0x{want:04X}", device=self.name)
        return data
