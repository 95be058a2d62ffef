"""Line-protocol track firmware emulator on a pty pair (docs/line-protocol.md).

Implements the firmware side of the protocol as a firmware author should:
``READY <fw> <version>`` once ``boot_delay_s`` after power-on (input before
that is lost, as in a bootloader), commands ``P S E R T V ?``, the ``#seq``
echo, `` *HH`` checksums on replies to lines that carried one, ``ERR
CMD|ARG|LEN|CHK`` with the motors untouched, and the watchdog: no valid ``P``
for the interval (``T``, default 500 ms) -> both PWMs 0 and flag bit 0
``TIMEOUT`` until the next valid ``P``. Replies end in CR LF (Arduino
``Serial.println``).

The board is USB-powered: :meth:`unplug` cuts its power (motors stop at once)
and :meth:`replug` boots it again (encoders zero, watchdog back to default,
``READY`` after ``boot_delay_s``). With ``reset_on_open`` (the default, an
Uno/Nano/Mega) it also reboots whenever a driver opens the port, as the DTR
auto-reset does (hardware-reference §7.3), so every open sees ``READY``;
without it (native-USB boards) a banner printed before the open is lost and
the driver has to probe with ``V``. :meth:`reset` presses the reset button.

PWM -255..255 drives the tank physics' tracks at duty PWM/255; encoder ticks
are the physics' counts since boot or the last ``R``.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Callable

from drivers import linemotor as lp
from drivers.emulators.pty import PtySerialDevice
from drivers.emulators.tank import TankPhysics

if TYPE_CHECKING:
    from drivers.config import LineMotorConfig

log = logging.getLogger(__name__)


class LineMotorEmulator(PtySerialDevice):
    """An emulated line-protocol firmware served on a pty.

    Args:
        physics: the tank whose tracks it drives; a private one when None.
        fw_name, version: the READY / V words.
        boot_delay_s: time from reset to READY, s (a real AVR bootloader takes 1-2 s;
            the default keeps tests and the simulated robot quick).
        reset_on_open: reboot when a driver opens the port (DTR auto-reset).
        millis_clock: the firmware's ``millis()`` source, s; default the physics time
            (:meth:`TankPhysics.now`), so ``E`` counts and their stamp come from one clock.
        link, record: see :class:`PtySerialDevice`.
    """

    def __init__(self, physics: TankPhysics | None = None, *, fw_name: str = "tankfw", version: str = "1.0.0",
                 boot_delay_s: float = 0.1, reset_on_open: bool = True,
                 millis_clock: Callable[[], float] | None = None, link: str | None = None,
                 record: int = 64) -> None:
        super().__init__(physics, link=link, record=record)
        self._millis_clock = millis_clock or self.physics.now
        for word in (fw_name, version):
            if not word or not word.isascii() or " " in word:
                raise ValueError(f"firmware name and version must be single ASCII words, got {word!r}")
        self.fw_name = fw_name
        self.version = version
        self.boot_delay_s = boot_delay_s
        self.reset_on_open = reset_on_open
        self.pwm = [0, 0]               # left, right, -255..255
        self.watchdog_ms = lp.WATCHDOG_MS_DEFAULT
        self.flags = 0
        self.booted = False
        self._boot_at = 0.0
        self._boot_t = 0.0
        self._last_p = 0.0
        self._enc_offset = (0, 0)
        self._buf = bytearray()
        self._overflow = False

    @classmethod
    def from_config(cls, cfg: LineMotorConfig, physics: TankPhysics | None = None,
                    **options) -> LineMotorEmulator:
        """The emulator a driver with ``cfg`` talks to (the protocol has no per-device options)."""
        return cls(physics, **options)

    # ------------------------------------------------------------------ power
    def reset(self) -> None:
        """Press reset: reboot now (state lost, READY after boot_delay_s)."""
        with self._lock:
            self._boot(time.monotonic())
            self._wake()

    def _boot(self, now: float) -> None:
        self._set_pwm(0, 0)
        self.watchdog_ms = lp.WATCHDOG_MS_DEFAULT
        self.flags = 0
        self.booted = False
        self._boot_at = now + self.boot_delay_s
        self._boot_t = self._millis_clock()
        self._last_p = now
        self._enc_offset = self.physics.encoder_counts()
        self._buf.clear()
        self._overflow = False
        self.stats["boots"] += 1

    _on_power_on = _boot
    _on_replug = _boot

    def _on_port_open(self, now: float) -> None:
        if self.reset_on_open:
            self._boot(now)

    def _on_unplug(self, now: float) -> None:
        self._set_pwm(0, 0)
        self.booted = False

    def _set_pwm(self, left: int, right: int) -> None:
        self.pwm = [left, right]
        self.physics.set_duty(left / lp.PWM_MAX, right / lp.PWM_MAX)

    def _on_time(self, now: float) -> float | None:
        if self._master is None:
            return None
        if not self.booted:
            if now < self._boot_at:
                return self._boot_at
            self.booted = True
            self._last_p = now
            self._send(lp.encode_line(f"READY {self.fw_name} {self.version}", eol="\r\n"))
        if self.flags & lp.FLAG_TIMEOUT:
            return None
        due = self._last_p + self.watchdog_ms / 1000
        if now < due:
            return due
        log.debug("line firmware: watchdog %d ms expired, PWMs to 0", self.watchdog_ms)
        self.stats["timeouts"] += 1
        self.flags |= lp.FLAG_TIMEOUT
        self._set_pwm(0, 0)
        return None

    # ------------------------------------------------------------------ input
    def _on_bytes(self, data: bytes, now: float) -> None:
        if not self.booted:
            self.stats["lost_while_booting"] += len(data)
            return
        self._buf += data
        while True:
            end = self._buf.find(b"\n")
            if end < 0:
                if len(self._buf) > lp.MAX_LINE_BYTES:
                    self._overflow = True
                    self._buf.clear()
                return
            raw = bytes(self._buf[:end + 1])
            del self._buf[:end + 1]
            if self._overflow:
                self._overflow = False
                self._record(raw)
                self._reply("ERR LEN", None, False)
            else:
                self._line(raw, now)

    def _reply(self, text: str, seq: int | None, with_checksum: bool) -> None:
        self._send(lp.encode_line(text, seq=seq, with_checksum=with_checksum, eol="\r\n"))

    def _line(self, raw: bytes, now: float) -> None:
        self._record(raw)
        starred = b" *" in raw
        try:
            line = lp.parse_line(raw)
        except lp.LineError as err:
            self.stats["rejected"] += 1
            self._reply(f"ERR {err.code}", None, starred and err.code != "LEN")
            return
        if not line.words:
            return  # an empty line resynchronises; no reply
        try:
            text = self._command(line.words[0], line.words[1:], now)
        except lp.LineError as err:
            self.stats["rejected"] += 1
            text = f"ERR {err.code}"
        else:
            self.stats["commands"] += 1
        self._reply(text, line.seq, line.checked)

    def _command(self, cmd: str, args: tuple[str, ...], now: float) -> str:
        """Run one command; its reply text. Raises LineError (motors untouched)."""
        arity = {"P": 2, "S": 0, "E": 0, "R": 0, "T": 1, "V": 0, "?": 0}
        if cmd not in arity:
            raise lp.LineError("CMD", f"unknown command {cmd!r}")
        if len(args) != arity[cmd]:
            raise lp.LineError("ARG", f"{cmd} takes {arity[cmd]} arguments, got {len(args)}")
        if cmd == "P":
            left, right = (lp.parse_int(a, -lp.PWM_MAX, lp.PWM_MAX) for a in args)
            self._set_pwm(left, right)
            self._last_p = now
            self.flags &= ~lp.FLAG_TIMEOUT
        elif cmd == "S":
            self._set_pwm(0, 0)
        elif cmd == "R":
            self._enc_offset = self.physics.encoder_counts()
        elif cmd == "T":
            self.watchdog_ms = lp.parse_int(args[0], lp.WATCHDOG_MS_MIN, lp.WATCHDOG_MS_MAX)
        elif cmd == "E":
            counts = self.physics.encoder_counts()
            left, right = (lp.wrap32(c - o) for c, o in zip(counts, self._enc_offset, strict=True))
            return f"E {left} {right} {int((self._millis_clock() - self._boot_t) * 1000) % 2**32}"
        elif cmd == "V":
            return f"V {self.fw_name} {self.version}"
        elif cmd == "?":
            return f"ST {self.flags:02X} {self.pwm[0]} {self.pwm[1]}"
        return "OK"

    def _corrupt(self, data: bytes) -> bytes:
        """Break the checksum digits when the reply has them, else the first byte."""
        star = data.rfind(b" *")
        if star >= 0:
            bad = int(data[star + 2:star + 4], 16) ^ 0x01
            return data[:star + 2] + b"%02X" % bad + data[star + 4:]
        return bytes([data[0] ^ 0x01]) + data[1:]

