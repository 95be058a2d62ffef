"""Arduino-class track firmware speaking the ASCII line protocol (docs/line-protocol.md).

The protocol is hardware-reference §8.2 made precise in docs/line-protocol.md:
one command per ``\\n``-terminated line of at most 64 bytes, an optional
``#<seq>`` first token echoed by the reply, an optional NMEA-style `` *HH``
XOR checksum, ``READY <fw> <version>`` after reset, and a firmware watchdog
that only ``P`` lines feed.

The driver (:class:`LineMotor`):

- ``open()`` waits up to ``cfg.ready_timeout_s`` for the ``READY`` banner
  (opening the port may reset an AVR board, §7.3); without one it probes with
  ``V`` (the board was already running), then sets the watchdog with
  ``T <ms>`` from ``cfg.firmware_timeout_s``;
- ``set_duty`` sends ``P <left> <right>`` with duty scaled by ``cfg.max_pwm``;
  ``stop`` sends ``S``;
- ``read_feedback`` sends ``E`` (encoder totals and firmware millis; speeds are
  computed from two consecutive readings) and ``?`` (status flags).

Every request carries a sequence number and, when ``cfg.checksum``, a checksum;
replies with another sequence number are stale and skipped. A missing reply
(DeviceTimeout), a reply failing its checksum or ``ERR CHK`` (ChecksumError) is
retried twice after resynchronising (bare ``\\n``, 12 ms pause, input flushed).
``ERR CMD|ARG|LEN`` raises DriverError at once; so does an unexpected
``READY`` (the board restarted and lost its watchdog setting: reopen).

A trip of the firmware's watchdog after ``T`` is counted (:attr:`LineMotor.watchdog_trips`)
and logged at WARNING (at most once a second; the others at DEBUG): seen in a ``?`` reply
(flag ``TIMEOUT`` once a ``P`` was acknowledged), or known when a ``P`` goes out more than the
interval after the last acknowledged ``P`` (or ``T``), which on the host's clock is a lower
bound of the firmware's own gap, so the firmware has tripped. One trip is counted once.

The line codec (:func:`encode_line`, :func:`parse_line`, :func:`checksum`,
:func:`parse_int`) is shared with the emulator, drivers/emulators/linemotor.py.
"""

from __future__ import annotations

import logging
import math
import re
import time
from typing import TYPE_CHECKING
from dataclasses import dataclass

from drivers.errors import ChecksumError, DeviceTimeout, DriverError
from drivers.base import MotorFeedback
from drivers.serialport import SerialFactory, SerialLink, SerialMotorController, transfer_s
from drivers.transport import Openers

if TYPE_CHECKING:
    from drivers.config import LineMotorConfig

log = logging.getLogger(__name__)

#: Longest line, bytes, terminator included.
MAX_LINE_BYTES = 64
SEQ_MAX = 65535
PWM_MAX = 255
WATCHDOG_MS_MIN = 100
WATCHDOG_MS_MAX = 5000
WATCHDOG_MS_DEFAULT = 500
#: Status flag bits of the ``ST`` reply.
FLAG_TIMEOUT = 0x01
FLAG_NAMES = {FLAG_TIMEOUT: "TIMEOUT"}
ERROR_CODES = ("CMD", "ARG", "LEN", "CHK")
#: Replies to skip (stale, out of sequence) before giving up on one request.
MAX_STALE_LINES = 4
#: Bytes kept while looking for the READY banner without a line end.
BANNER_BUFFER_BYTES = 4 * MAX_LINE_BYTES
#: Shortest time between two WARNING lines about firmware watchdog trips, s (the others: DEBUG).
TRIP_LOG_PERIOD_S = 1.0

_INT = re.compile(r"-?[0-9]{1,10}")
_HEX = re.compile(r"[0-9A-Fa-f]{1,8}")


class LineError(ValueError):
    """A line that breaks the grammar.

    Attributes:
        code: the ``ERR`` code a firmware answers with: ``LEN``, ``CHK``, ``ARG`` or ``CMD``.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class Line:
    """One parsed line.

    Attributes:
        seq: the ``#<n>`` sequence number, or None.
        words: the command or reply word and its arguments (empty for an empty line).
        checked: the line carried a `` *HH`` checksum (which matched).
    """

    seq: int | None
    words: tuple[str, ...]
    checked: bool


def checksum(body: bytes) -> int:
    """XOR of every byte of ``body`` (the line before `` *HH``), 0-255."""
    value = 0
    for byte in body:
        value ^= byte
    return value


def encode_line(text: str, *, seq: int | None = None, with_checksum: bool = False, eol: str = "\n") -> bytes:
    """``[#seq ]text[ *HH]`` + ``eol`` as ASCII bytes.

    Raises:
        LineError: ``LEN`` when the line would exceed MAX_LINE_BYTES, ``ARG`` for a bad seq or non-ASCII text.
    """
    if seq is not None and not 0 <= seq <= SEQ_MAX:
        raise LineError("ARG", f"sequence number {seq} outside 0..{SEQ_MAX}")
    try:
        body = (f"#{seq} {text}" if seq is not None else text).encode("ascii")
    except UnicodeEncodeError as err:
        raise LineError("ARG", f"line text {text!r} is not ASCII") from err
    if with_checksum:
        body += b" *%02X" % checksum(body)
    line = body + eol.encode("ascii")
    if len(line) > MAX_LINE_BYTES:
        raise LineError("LEN", f"line of {len(line)} bytes exceeds {MAX_LINE_BYTES}")
    return line


def parse_line(raw: bytes) -> Line:
    """Parse one line (terminator optional); the inverse of :func:`encode_line`.

    Raises:
        LineError: ``LEN`` over MAX_LINE_BYTES, ``CHK`` a malformed or wrong checksum,
            ``ARG`` non-ASCII text or a bad sequence token.
    """
    if len(raw) > MAX_LINE_BYTES:
        raise LineError("LEN", f"line of {len(raw)} bytes exceeds {MAX_LINE_BYTES}")
    body = raw.rstrip(b"\r\n")
    checked = False
    star = body.rfind(b" *")
    if star >= 0:
        digits = body[star + 2:]
        if len(digits) != 2 or not _HEX.fullmatch(digits.decode("ascii", "replace")):
            raise LineError("CHK", f"checksum field {digits!r} is not two hex digits")
        if int(digits, 16) != checksum(body[:star]):
            raise LineError("CHK", f"checksum {digits.decode()} does not match {checksum(body[:star]):02X}")
        body, checked = body[:star], True
    try:
        words = body.decode("ascii").split()
    except UnicodeDecodeError as err:
        raise LineError("ARG", f"line {raw!r} is not ASCII") from err
    seq = None
    if words and words[0].startswith("#"):
        token = words.pop(0)[1:]
        if not token.isdigit() or int(token) > SEQ_MAX:
            raise LineError("ARG", f"sequence token #{token} is not 0..{SEQ_MAX}")
        seq = int(token)
    return Line(seq, tuple(words), checked)


def parse_int(token: str, low: int, high: int) -> int:
    """A decimal integer token (optional ``-``, digits only) within ``low..high``.

    Raises:
        LineError: ``ARG`` when it is not one.
    """
    if not _INT.fullmatch(token) or not low <= int(token) <= high:
        raise LineError("ARG", f"{token!r} is not an integer in {low}..{high}")
    return int(token)


def flag_names(flags: int) -> tuple[str, ...]:
    """Names of the ``ST`` flag bits set in ``flags`` (unknown bits as ``bit N``)."""
    return tuple(FLAG_NAMES.get(1 << n, f"bit {n}") for n in range(32) if flags >> n & 1)


class LineMotor(SerialMotorController):
    """Track firmware on the ASCII line protocol.

    Args:
        cfg: port, baud, firmware_timeout_s, max_pwm, checksum, ready_timeout_s,
            invert_left/right, reply_timeout_s.
        serial_factory: returns an open ``serial.Serial``-like object; default
            ``serial_for_url(cfg.port, cfg.baud)`` 8N1 exclusive.
        name: configured device name, used in errors and logs.
        openers: URL scheme -> opener table for the default factory (``sim://`` ports;
            drivers/transport.py).

    Attributes:
        firmware: ``"<fw_name> <version>"`` from the READY banner or the V reply.
        watchdog_trips: firmware watchdog trips since open (see the module docstring).
    """

    @classmethod
    def own_timeout_s(cls, cfg: LineMotorConfig) -> float:
        """The firmware watchdog set at open (``T`` command), s."""
        return cfg.firmware_timeout_s

    @classmethod
    def feedback_hz(cls, cfg: LineMotorConfig) -> float:
        """``cfg.feedback_hz``, Hz."""
        return cfg.feedback_hz

    def __init__(self, cfg: LineMotorConfig, *, serial_factory: SerialFactory | None = None,
                 name: str = "motor", openers: Openers | None = None) -> None:
        super().__init__(cfg, serial_factory=serial_factory, name=name, openers=openers,
                         timeout_s=cfg.reply_timeout_s + transfer_s(MAX_LINE_BYTES, cfg.baud))
        self.cfg: LineMotorConfig = cfg
        self.firmware = ""
        self._seq = 0
        self._last_e: tuple[int, int, int] | None = None
        self.watchdog_trips = 0
        self._fed_at: float | None = None     # host time of the last acknowledged P (or T), s
        self._fed = False                     # a P was acknowledged since open
        self._tripped = False                 # a trip was counted that no P has cleared yet
        self._trip_logged = -math.inf

    # ------------------------------------------------------------------ protocol
    def _handshake(self, link: SerialLink) -> None:
        banner = self._wait_ready(link)
        link.flush_input()
        if banner is None:
            log.info("%s: no READY banner within %.1f s; probing with V", self.name, self.cfg.ready_timeout_s)
            banner = " ".join(self._command(link, "V", "V"))
        self.firmware = banner
        watchdog_ms = round(self.cfg.firmware_timeout_s * 1000)
        self._command(link, f"T {watchdog_ms}", "OK")
        self._fed_at, self._fed, self._tripped = time.monotonic(), False, False
        self._last_e = None
        log.info("%s: line firmware %r, watchdog %d ms", self.name, self.firmware, watchdog_ms)

    def _wait_ready(self, link: SerialLink) -> str | None:
        """The text after ``READY`` of the first banner line within ready_timeout_s, or None."""
        deadline = time.monotonic() + self.cfg.ready_timeout_s
        pending = b""
        while time.monotonic() < deadline:
            pending += link.read_until(b"\n", MAX_LINE_BYTES)
            while b"\n" in pending:
                raw, pending = pending.split(b"\n", 1)
                try:
                    line = parse_line(raw)
                except LineError as err:
                    log.debug("%s: skipping boot noise %r: %s", self.name, raw, err)
                    continue
                if line.words[:1] == ("READY",):
                    return " ".join(line.words[1:])
            pending = pending[-BANNER_BUFFER_BYTES:]
        return None

    def _write_duty(self, link: SerialLink, left: float, right: float) -> None:
        scale = self.cfg.max_pwm
        if self._fed_at is not None:
            gap_s = time.monotonic() - self._fed_at
            if gap_s > self.cfg.firmware_timeout_s:
                self._trip(f"no P for {gap_s * 1000:.0f} ms")
        self._command(link, f"P {round(left * scale)} {round(right * scale)}", "OK")
        self._fed_at, self._fed, self._tripped = time.monotonic(), True, False

    def _trip(self, why: str) -> None:
        """Count a firmware watchdog trip (once until the next acknowledged P) and log it."""
        if self._tripped:
            return
        self._tripped = True
        self.watchdog_trips += 1
        now = time.monotonic()
        level = logging.WARNING if now - self._trip_logged >= TRIP_LOG_PERIOD_S else logging.DEBUG
        if level == logging.WARNING:
            self._trip_logged = now
        log.log(level, "%s: firmware watchdog tripped (%s; watchdog %d ms): the firmware stopped the motors "
                "(trip %d since open)", self.name, why, round(self.cfg.firmware_timeout_s * 1000), self.watchdog_trips)

    def _write_stop(self, link: SerialLink) -> None:
        self._command(link, "S", "OK")

    def _read_feedback(self, link: SerialLink) -> MotorFeedback:
        enc = self._command(link, "E", "E")
        left, right, ms = self._ints(enc, "E", (-2**31, 2**31 - 1), (-2**31, 2**31 - 1), (0, 2**32 - 1))
        st = self._command(link, "?", "ST")
        if len(st) != 3 or not _HEX.fullmatch(st[0]):
            raise DriverError(f"{self.name}: malformed status reply ST {' '.join(st)}", device=self.name)
        flags = int(st[0], 16)
        if flags & FLAG_TIMEOUT and self._fed:
            self._trip("status TIMEOUT")
        sl, sr = self.side_sign("left"), self.side_sign("right")
        left_cps = right_cps = None
        if self._last_e is not None:
            dt_ms = (ms - self._last_e[2]) % 2**32
            if dt_ms > 0:
                left_cps = sl * wrap32(left - self._last_e[0]) * 1000.0 / dt_ms
                right_cps = sr * wrap32(right - self._last_e[1]) * 1000.0 / dt_ms
        self._last_e = (left, right, ms)
        return MotorFeedback(left_counts=sl * left, right_counts=sr * right, left_cps=left_cps,
                             right_cps=right_cps, status=flags, status_text=flag_names(flags))

    def _ints(self, words: tuple[str, ...], what: str, *ranges: tuple[int, int]) -> list[int]:
        if len(words) != len(ranges):
            raise DriverError(f"{self.name}: {what} reply has {len(words)} values, expected {len(ranges)}",
                              device=self.name)
        try:
            return [parse_int(w, lo, hi) for w, (lo, hi) in zip(words, ranges, strict=True)]
        except LineError as err:
            raise DriverError(f"{self.name}: malformed {what} reply: {err}", device=self.name) from err

    def _drain(self, link: SerialLink) -> None:
        """Drop unread input before a request, noticing a READY banner (the board restarted)."""
        stale = link.read_pending()
        if any(line.strip().startswith(b"READY") for line in stale.split(b"\n")):
            raise DriverError(f"{self.name}: firmware restarted ({stale.strip()!r}); its watchdog setting "
                              "is lost, reopen", device=self.name)
        if stale:
            log.debug("%s: dropping %d stale input bytes", self.name, len(stale))

    def _resync(self, link: SerialLink) -> None:
        link.write(b"\n")
        link.flush_input()

    # ------------------------------------------------------------------ transactions
    def _command(self, link: SerialLink, text: str, expect: str) -> tuple[str, ...]:
        """Send ``text``, return the words after the ``expect`` reply word, with retries."""

        def attempt() -> tuple[str, ...]:
            self._seq = (self._seq + 1) % (SEQ_MAX + 1)
            seq = self._seq
            self._drain(link)
            link.write(encode_line(text, seq=seq, with_checksum=self.cfg.checksum))
            for _ in range(MAX_STALE_LINES):
                raw = link.read_until(b"\n", MAX_LINE_BYTES)
                if not raw.endswith(b"\n"):
                    raise DeviceTimeout(f"{self.name}: no reply line to {text!r} (got {raw!r})", device=self.name)
                reply = self._parse_reply(raw, text)
                head = reply.words[0] if reply.words else ""
                if head == "READY":
                    raise DriverError(f"{self.name}: firmware restarted ({raw!r}) while waiting for {text!r}; "
                                      "its watchdog setting is lost, reopen", device=self.name)
                if reply.seq == seq or (head == "ERR" and reply.seq is None):
                    break
                log.debug("%s: skipping stale line %r (waiting for #%d)", self.name, raw, seq)
            else:
                raise DeviceTimeout(f"{self.name}: no reply with #{seq} to {text!r}", device=self.name)
            if head == "ERR":
                code = reply.words[1] if len(reply.words) > 1 else "?"
                cls = ChecksumError if code == "CHK" else DriverError
                raise cls(f"{self.name}: firmware rejected {text!r}: ERR {code}", device=self.name)
            if head != expect:
                raise DriverError(f"{self.name}: expected {expect} reply to {text!r}, got {raw!r}", device=self.name)
            return reply.words[1:]

        return self._retrying(link, f"{text!r}", attempt)

    def _parse_reply(self, raw: bytes, text: str) -> Line:
        try:
            reply = parse_line(raw)
        except LineError as err:
            raise ChecksumError(f"{self.name}: corrupt reply {raw!r} to {text!r}: {err}", device=self.name) from err
        unchecked_ok = reply.words[:1] == ("READY",) or reply.words[:2] == ("ERR", "LEN")
        if self.cfg.checksum and not reply.checked and not unchecked_ok:
            raise ChecksumError(f"{self.name}: reply {raw!r} to {text!r} has no checksum", device=self.name)
        return reply


def wrap32(value: int) -> int:
    """``value`` folded into the signed 32-bit range, as the firmware's counters and their differences wrap."""
    return (value + 2**31) % 2**32 - 2**31
