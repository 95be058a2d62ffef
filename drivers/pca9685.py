"""NXP PCA9685 16-channel 12-bit PWM chip driving hobby servos, over I2C (smbus2).

Facts from hardware-reference §6 (PCA9685 data sheet rev 4, Tables 3-7,
§7.3.1.1, §7.3.5): MODE1 0x00 (RESTART 0x80, AI 0x20, SLEEP 0x10), MODE2 0x01
(OUTDRV 0x04 totem-pole); channel n registers ON_L, ON_H, OFF_L, OFF_H at
0x06 + 4n (little-endian counts, OFF_H bit 4 = full OFF); PRE_SCALE 0xFE is
writable only while SLEEP = 1; after clearing SLEEP the oscillator needs
500 us before RESTART may be written.

Frequency: ``prescale = round(osc / (4096 f)) - 1`` clamped to 3..255, and the
real output frequency ``f_actual = osc / (4096 (prescale + 1))`` (50 Hz ->
121 -> 50.03 Hz at 25 MHz). Pulses: ON = 0, OFF =
``round(pulse_us * f_actual * 4096 / 1e6)``, the four channel registers
written in one auto-increment block. The internal oscillator is only about
+-8 % accurate (23-27 MHz): calibrate ``oscillator_hz`` with a scope.

``close()`` turns every channel fully off (ALL_LED_OFF_H = 0x10): servos go
limp. ``open()`` leaves running channels as they were.

Power cycle: a brown-out of the chip's supply resets its registers with no I2C error (MODE1 back
to its power-on 0x11: SLEEP set, oscillator off, AI clear, so a 4-byte channel write lands in one
register; PRE_SCALE back to 0x1E; every output off; datasheet rev. 4, 7.3.1 MODE1).
:meth:`Pca9685.check_setup` (the agent calls it every :attr:`Pca9685.check_period_s`) reads MODE1
(one 1-byte read) and, when SLEEP is set or AI clear, writes the open sequence again and every
channel's last commanded registers, then raises :class:`drivers.errors.DeviceReset`.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Callable, TYPE_CHECKING

from drivers.errors import DeviceReset, DriverError
from drivers.base import ServoController
from drivers.i2c import I2cDevice, SMBusLike

if TYPE_CHECKING:
    from drivers.config import Pca9685Config

log = logging.getLogger(__name__)

REG_MODE1 = 0x00
REG_MODE2 = 0x01
REG_LED0_ON_L = 0x06
REG_ALL_LED_OFF_H = 0xFD
REG_PRE_SCALE = 0xFE

MODE1_RESTART = 0x80
MODE1_AI = 0x20
MODE1_SLEEP = 0x10
MODE2_OUTDRV = 0x04
LED_FULL = 0x10
CHANNELS = 16
COUNTS = 4096
PRESCALE_MIN, PRESCALE_MAX = 3, 255
#: Oscillator start-up after clearing SLEEP before RESTART, s (§7.3.1.1).
OSC_STARTUP_S = 500e-6


def prescale_for(frequency_hz: float, oscillator_hz: float = 25e6) -> int:
    """PRE_SCALE for an output frequency: round(osc / (4096 f)) - 1, clamped to 3..255 (§6.4)."""
    return max(PRESCALE_MIN, min(PRESCALE_MAX, round(oscillator_hz / (COUNTS * frequency_hz)) - 1))


def actual_frequency_hz(prescale: int, oscillator_hz: float = 25e6) -> float:
    """Output frequency a PRE_SCALE gives: osc / (4096 (prescale + 1)), Hz."""
    return oscillator_hz / (COUNTS * (prescale + 1))


def pulse_counts(pulse_us: float, frequency_hz: float) -> int:
    """OFF count for a pulse at ON = 0: round(us * f * 4096 / 1e6) (§6.6)."""
    return round(pulse_us * frequency_hz * COUNTS / 1e6)


class Pca9685(ServoController):
    """PCA9685 servo outputs.

    Args:
        cfg: address, frequency, oscillator (drivers.config.Pca9685Config).
        bus: smbus2.SMBus-like object (shared; not closed by this driver).
        name: config name for errors and health.
        sleep: sleep function, s (oscillator start-up wait).
    """

    #: MODE1 is read back this often to notice a power-cycled chip, s (:meth:`check_setup`).
    check_period_s = 0.5

    def __init__(self, cfg: Pca9685Config, bus: SMBusLike, *, name: str = "servo",
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.cfg = cfg
        self.name = name
        self._dev = I2cDevice(bus, cfg.address, device=name, chip="PCA9685")
        self._sleep = sleep
        self.prescale = prescale_for(cfg.frequency_hz, cfg.oscillator_hz)
        self.frequency_hz = actual_frequency_hz(self.prescale, cfg.oscillator_hz)
        self.period_us = 1e6 / self.frequency_hz
        self._outputs: dict[int, list[int]] = {}     # channel -> its last commanded ON_L..OFF_H
        self.resets = 0

    def open(self) -> None:
        """Sleep, write PRE_SCALE, set MODE2 totem-pole, wake, wait 500 us, RESTART with AI on.

        PRE_SCALE and MODE1 are read back to confirm.

        Raises:
            DriverError: bus error (errno kept), read-back mismatch.
            DeviceClosed: after close().
        """
        self._set_up()
        prescale, mode1 = self._dev.read_u8(REG_PRE_SCALE), self._dev.read_u8(REG_MODE1)
        if prescale != self.prescale or mode1 & (MODE1_SLEEP | MODE1_AI) != MODE1_AI:
            raise self._dev.error(f"read-back PRE_SCALE {prescale} MODE1 0x{mode1:02x}, "
                                  f"expected PRE_SCALE {self.prescale} with AI on and SLEEP off")
        self._dev.ready = True
        log.info("%r open: prescale %d, %.2f Hz", self._dev, self.prescale, self.frequency_hz)

    def _set_up(self) -> None:
        """The open sequence: sleep, PRE_SCALE, MODE2 totem-pole, wake, 500 us, RESTART with AI on."""
        mode1 = self._dev.read_u8(REG_MODE1) & ~MODE1_RESTART & 0xFF
        self._dev.write_u8(REG_MODE1, mode1 | MODE1_SLEEP)
        self._dev.write_u8(REG_PRE_SCALE, self.prescale)
        self._dev.write_u8(REG_MODE2, MODE2_OUTDRV)
        awake = (mode1 & ~MODE1_SLEEP) | MODE1_AI
        self._dev.write_u8(REG_MODE1, awake)
        self._sleep(OSC_STARTUP_S)
        self._dev.write_u8(REG_MODE1, awake | MODE1_RESTART)

    def check_setup(self) -> None:
        """Read MODE1; when the chip lost its setup (SLEEP set or AI clear: power-cycled), write the
        open sequence and every channel's last commanded registers again, then raise DeviceReset.

        Raises:
            DeviceReset: the chip was set up again (:attr:`resets` counts it).
            DriverError: bus error (errno kept). DeviceClosed: after close().
        """
        self._dev.require_ready()
        mode1 = self._dev.read_u8(REG_MODE1)
        if mode1 & (MODE1_SLEEP | MODE1_AI) == MODE1_AI:
            return
        self._set_up()
        for channel, regs in sorted(self._outputs.items()):
            self._dev.write_block(REG_LED0_ON_L + 4 * channel, regs)
        self.resets += 1
        raise DeviceReset(
            f"{self._dev}: lost its setup: MODE1 read 0x{mode1:02x} "
            f"(SLEEP {'set' if mode1 & MODE1_SLEEP else 'clear'}, AI {'set' if mode1 & MODE1_AI else 'clear'}; "
            f"0x11 is its power-on value: a power cycle or brown-out); "
            f"set up again (prescale {self.prescale}), {len(self._outputs)} channels written again", device=self.name)

    def close(self) -> None:
        """Turn every channel fully off (servos limp), then mark closed. Idempotent, never raises."""
        if self._dev.ready:
            try:
                self._dev.write_u8(REG_ALL_LED_OFF_H, LED_FULL)
            except DriverError as err:
                log.warning("%r: releasing all channels at close failed: %s", self._dev, err)
        self._dev.close()

    def _check_channel(self, channel: int) -> None:
        if isinstance(channel, bool) or not isinstance(channel, int) or not 0 <= channel < CHANNELS:
            log.error("%r: channel %r is not 0..15; nothing written", self._dev, channel)
            raise self._dev.error(f"channel {channel!r} is not 0..15")

    def set_pulse_us(self, channel: int, pulse_us: float) -> None:
        """Output a ``pulse_us`` high time per period on ``channel`` (0 = full off).

        Args:
            channel: 0..15.
            pulse_us: 0 (off) or 0 < us < period (20000 us at 50 Hz).

        Raises:
            DriverError: bad channel or pulse (logged, nothing written), bus error (errno kept).
            DeviceClosed: after close().
        """
        self._dev.require_ready()
        self._check_channel(channel)
        ok = isinstance(pulse_us, (int, float)) and not isinstance(pulse_us, bool) and math.isfinite(pulse_us)
        if not ok or not 0 <= pulse_us < self.period_us:
            log.error("%r: pulse %r us on channel %d is not 0..%.0f us; nothing written",
                      self._dev, pulse_us, channel, self.period_us)
            raise self._dev.error(f"pulse {pulse_us!r} us on channel {channel} is not 0..{self.period_us:.0f} us")
        counts = min(pulse_counts(pulse_us, self.frequency_hz), COUNTS - 1)
        if counts == 0:
            self.release(channel)
            return
        self._write_channel(channel, [0, 0, counts & 0xFF, counts >> 8])

    def release(self, channel: int) -> None:
        """Full OFF on ``channel`` (servo unpowered, limp).

        Raises:
            DriverError: bad channel (logged, nothing written), bus error (errno kept).
            DeviceClosed: after close().
        """
        self._dev.require_ready()
        self._check_channel(channel)
        self._write_channel(channel, [0, 0, 0, LED_FULL])

    def _write_channel(self, channel: int, regs: list[int]) -> None:
        """Write ON_L..OFF_H of ``channel`` in one block; kept as its last command (:meth:`check_setup`)."""
        self._outputs[channel] = regs
        self._dev.write_block(REG_LED0_ON_L + 4 * channel, regs)
